"""The program that holds an RLM REPL's namespace inside the sandbox.

:class:`skyrl_gym.envs.rlm.repl.PersistentREPL` copies this file into a sandbox's work folder and starts it as
``python -u .skyrl_rlm.py``. It talks to the host over its original stdin and stdout, which it moves to private
descriptors before any model code runs, in frames of ``b"SKYRL"``, ten digits of length, a newline and a JSON
object:

- host -> here: ``setup`` (builtins, the scaffold, the callable tools, values to bind), ``bind`` (more values,
  e.g. another context), ``run`` (a cell: code, timeout, output cap) and ``reply`` (the answer to a call);
- here -> host: ``ready``, ``ok``, ``call`` (the code called ``llm_query``, ``rlm_query`` or a custom tool:
  the function's name and its arguments as JSON) and ``done`` (what the cell printed, its error, the final
  answer ``FINAL_VAR`` set, and the cell's variables by name and type).

Values the host binds or returns come pickled (host data into the sandbox); what goes out is JSON only, which
the host validates, so nothing the code does here can hand the host an object. The cell's time limit is a
one-shot ``SIGALRM`` (blocked while a call waits for the host, so the frames stay in step); the host kills the
whole sandbox if the cell outlives it anyway.

Standard library only, Python 3.8 or newer. Nothing here runs on import: the host only reads this file.
"""

import base64
import builtins
import json
import os
import pickle
import signal
import sys
import traceback

MAGIC = b"SKYRL"
MAX_FRAME = 1 << 30  # frames come from the host (a long context can be large); the cap only stops garbage
MAX_VARIABLES = 1000
MAX_NAME_CHARS = 200
MAX_FINAL_CHARS = 1_000_000
OUT_FILE = ".rlm_stdout"
ERR_FILE = ".rlm_stderr"

# SkyRL's REPL table: these builtins and nothing else (no import, no files, no eval, no class statement).
SAFE_BUILTIN_NAMES = (
    "print", "len", "str", "int", "float", "list", "dict", "set", "tuple", "bool", "type", "isinstance",
    "issubclass", "enumerate", "zip", "map", "filter", "sorted", "reversed", "range", "min", "max", "sum",
    "abs", "round", "any", "all", "pow", "divmod", "chr", "ord", "hex", "bin", "oct", "repr", "ascii",
    "format", "hash", "id", "iter", "next", "slice", "callable", "hasattr", "getattr", "setattr", "delattr",
    "dir", "vars", "bytes", "bytearray", "memoryview", "complex", "object", "super", "property",
    "staticmethod", "classmethod", "Exception", "BaseException", "ValueError", "TypeError", "KeyError",
    "IndexError", "AttributeError", "FileNotFoundError", "OSError", "IOError", "RuntimeError", "NameError",
    "ImportError", "StopIteration", "AssertionError", "NotImplementedError", "ArithmeticError",
    "LookupError", "Warning",
)  # fmt: skip
BLOCKED_BUILTIN_NAMES = ("__import__", "open", "input", "eval", "exec", "compile", "globals", "locals")
SHOWN_TYPES = (str, int, float, bool, list, dict, tuple)


class CellTimeout(BaseException):
    """Raised into the cell when its time is up (a BaseException, so ``except Exception`` does not eat it)."""


class Channel:
    """Frames over two file descriptors."""

    def __init__(self, read_fd, write_fd):
        self.read_fd = read_fd
        self.write_fd = write_fd

    def send(self, message):
        """Write one frame."""
        data = json.dumps(message).encode("ascii")
        data = MAGIC + b"%010d\n" % len(data) + data
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self):
        """Read one frame (exit quietly when the host is gone or out of step)."""
        header = self._read(16)
        if len(header) < 16 or header[:5] != MAGIC or not header[5:15].isdigit():
            os._exit(0)  # the host is gone or out of step: nothing sensible is left to do
        length = int(header[5:15])
        if length > MAX_FRAME:
            os._exit(0)
        message = json.loads(self._read(length).decode("utf-8", "surrogatepass"))
        return message if isinstance(message, dict) else {}

    def _read(self, n):
        chunks = []
        while n:
            chunk = os.read(self.read_fd, min(n, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def unpack(data):
    """A value the host packed (pickled, base64)."""
    return pickle.loads(base64.b64decode(data))


def cell_traceback(exc):
    """The traceback of the cell's own frames only (no frame of this driver, no host path)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<string>"]
    text = "Traceback (most recent call last):\n" if frames else ""
    text += "".join(traceback.format_list(frames))
    return text + "".join(traceback.format_exception_only(type(exc), exc))


class Repl:
    """The namespace and the cell loop."""

    def __init__(self, channel):
        self.channel = channel
        self.namespace = {}
        self.builtins = builtins
        self.scaffold = {}
        self.context = None
        self.has_context = False
        self.final = None
        self.seq = 0
        self.calls = 0
        self.armed = False

    # -- requests --------------------------------------------------------------------------------------
    def serve(self):
        """Answer requests until the host goes away."""
        self.channel.send({"op": "ready", "python": sys.version.split()[0]})
        while True:
            request = self.channel.receive()
            op = request.get("op")
            if op == "setup":
                self.setup(request)
                self.channel.send({"op": "ok", "seq": request.get("seq")})
            elif op == "bind":
                self.bind(request.get("values", []))
                self.channel.send({"op": "ok", "seq": request.get("seq")})
            elif op == "run":
                self.channel.send(self.run(request))
            # anything else (a late reply) is dropped

    def setup(self, request):
        """Build the namespace: builtins, scaffold functions, tool proxies and the bound values."""
        if request.get("restricted", True):
            table = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}
            table.update(dict.fromkeys(BLOCKED_BUILTIN_NAMES))
            self.builtins = table
        self.scaffold = {"FINAL_VAR": self.final_var, "SHOW_VARS": self.show_vars}
        if request.get("lm", False):
            self.scaffold.update(
                llm_query=self.llm_query,
                llm_query_batched=self.llm_query_batched,
                rlm_query=self.rlm_query,
                rlm_query_batched=self.rlm_query_batched,
            )
        for name in request.get("tools", []):
            self.scaffold[name] = self.tool_proxy(name)
        self.namespace.clear()
        self.namespace["__builtins__"] = self.builtins
        self.namespace["__name__"] = "__main__"
        self.namespace.update(self.scaffold)
        self.bind(request.get("values", []))

    def bind(self, values):
        """Bind ``[name, packed value]`` pairs in the namespace (``context`` is also kept aside to restore)."""
        for name, data in values:
            value = unpack(data)
            self.namespace[name] = value
            if name == "context":
                self.context, self.has_context = value, True

    def restore(self):
        """Put back what the code may have overwritten: builtins, scaffold functions, ``context``."""
        self.namespace["__builtins__"] = self.builtins
        self.namespace["__name__"] = "__main__"
        self.namespace.update(self.scaffold)
        if self.has_context:
            self.namespace["context"] = self.context

    # -- a cell ----------------------------------------------------------------------------------------
    def on_alarm(self, signum, frame):
        """SIGALRM: the cell's time is up."""
        if self.armed:
            self.armed = False  # one shot: the host's deadline deals with code that swallows it
            raise CellTimeout()

    def run(self, request):
        """Run one cell with its stdout and stderr captured; the ``done`` frame to send back."""
        self.seq = request.get("seq", 0)
        self.final = None
        limit = int(request.get("max_output", 262144))
        timeout = float(request.get("timeout", 15.0))
        out_fd = os.open(OUT_FILE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        err_fd = os.open(ERR_FILE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
        error = None
        timed_out = False
        signal.signal(signal.SIGALRM, self.on_alarm)
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            try:
                exec(compile(request.get("code", ""), "<string>", "exec"), self.namespace)
                self.armed = False
            except CellTimeout:
                timed_out = True
            except BaseException as exc:
                self.armed = False
                error = cell_traceback(exc)
        except CellTimeout:  # the one alarm went off while the error above was being formatted
            timed_out = True
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        stdout, stdout_bytes = self.captured(1, limit)
        stderr, stderr_bytes = self.captured(2, limit)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        self.restore()
        final = self.final
        if final is not None and len(final) > MAX_FINAL_CHARS:
            final = final[:MAX_FINAL_CHARS]
        return {
            "op": "done",
            "seq": self.seq,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_bytes": stdout_bytes,
            "stderr_bytes": stderr_bytes,
            "error": error,
            "timed_out": timed_out,
            "final": final,
            "variables": self.variables(),
        }

    @staticmethod
    def captured(fd, limit):
        """The first ``limit`` bytes written to ``fd`` in this cell, and how many were written."""
        try:
            size = os.fstat(fd).st_size
            os.lseek(fd, 0, os.SEEK_SET)
            data = os.read(fd, limit) if limit > 0 else b""
        except OSError:  # the code closed or replaced its own stdout: it printed nothing we can read
            return "", 0
        return data.decode("utf-8", "replace"), size

    def user_names(self):
        """The code's own variables (and bound contexts and values), in the order they were first set."""
        return [
            name
            for name in list(self.namespace)
            if isinstance(name, str)
            and not name.startswith("_")
            and name not in self.scaffold
            and len(name) <= MAX_NAME_CHARS
        ]

    def variables(self):
        """``[name, type name, shown]`` for the first variables (shown: SkyRL lists it as plain data)."""
        found = []
        for name in self.user_names()[:MAX_VARIABLES]:
            value = self.namespace.get(name)
            found.append([name, type(value).__name__, isinstance(value, SHOWN_TYPES)])
        return found

    # -- the scaffold ----------------------------------------------------------------------------------
    def final_var(self, variable_name):
        """Return a variable's value (as text) as the final answer; a non-string argument is the answer."""
        if not isinstance(variable_name, str):
            self.final = str(variable_name)
            return self.final
        variable_name = variable_name.strip().strip("\"'")
        if variable_name in self.namespace:
            self.final = str(self.namespace[variable_name])
            return self.final
        available = self.user_names()
        if available:
            message = (
                f"Error: Variable '{variable_name}' not found. Available variables: {available}. "
                "You must create and assign a variable BEFORE calling FINAL_VAR on it."
            )
        else:
            message = (
                f"Error: Variable '{variable_name}' not found. No variables have been created yet. "
                "You must create and assign a variable in a ```repl``` block BEFORE calling FINAL_VAR on it."
            )
        print(message)
        return message

    def show_vars(self):
        """The variables created so far, with their types."""
        available = {name: type(self.namespace.get(name)).__name__ for name in self.user_names()}
        if not available:
            return "No variables created yet. Use ```repl``` blocks to create variables."
        return f"Available variables: {available}"

    def llm_query(self, prompt, model=None):
        """Ask the language model one prompt; returns its answer as a str."""
        return self.call("llm_query", [prompt], {"model": model})

    def llm_query_batched(self, prompts, model=None):
        """Ask the language model several prompts at once; returns the answers in order."""
        return self.call("llm_query_batched", [prompts], {"model": model})

    def rlm_query(self, prompt, model=None, context=None):
        """Hand a sub-task to a child agent with its own REPL (``context`` becomes its ``context``)."""
        return self.call("rlm_query", [prompt], {"model": model, "context": context})

    def rlm_query_batched(self, prompts, model=None, context_list=None):
        """Hand several sub-tasks to child agents; returns their answers in order."""
        return self.call("rlm_query_batched", [prompts], {"model": model, "context_list": context_list})

    def tool_proxy(self, name):
        """A function that runs the host's custom tool ``name``."""

        def tool(*args, **kwargs):
            return self.call(name, list(args), kwargs)

        tool.__name__ = tool.__qualname__ = name
        return tool

    def call(self, fn, args, kwargs):
        """Run ``fn`` on the host and wait for its answer; SIGALRM waits until the answer is read."""
        self.calls += 1
        call_id = self.calls
        try:
            payload = {"op": "call", "seq": self.seq, "id": call_id, "fn": fn, "args": args, "kwargs": kwargs}
            message = json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(
                f"{fn}(): arguments must be plain data (str, int, float, bool, None and lists or dicts of them): "
                f"{exc}"
            ) from None
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            data = message.encode("ascii")
            data = MAGIC + b"%010d\n" % len(data) + data
            view = memoryview(data)
            while view:
                view = view[os.write(self.channel.write_fd, view) :]
            while True:
                reply = self.channel.receive()
                if reply.get("op") == "reply" and reply.get("id") == call_id:
                    break
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return unpack(reply["value"])


def main():
    """Move the channel off stdin/stdout, then serve."""
    read_fd = os.dup(0)
    write_fd = os.dup(1)
    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # past the file-size limit a write fails instead of killing us
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = open(os.devnull)
    Repl(Channel(read_fd, write_fd)).serve()


if __name__ == "__main__":
    main()
