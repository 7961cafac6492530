"""Bug injection: small AST-guided edits of a function's source text.

The module's AST says where a bug can go; the bug itself is an edit of the source text at those positions
(an operator token, an operand, a constant, a condition, whole lines of a statement), so everything else in
the file (comments, formatting, the rest of the function) stays byte for byte as it was and the bug's diff is
a few lines, like a real one. Every edit is checked: the new text parses and its AST differs from the old.

Kinds (:data:`BUG_KINDS`):

- ``flip_operator``: ``+`` / ``-``, ``<`` / ``<=``, ``==`` / ``!=``, ``in`` / ``not in``, ``and`` / ``or``...
- ``swap_operands``: ``a - b`` -> ``b - a``, ``a < b`` -> ``b < a``;
- ``change_constant``: an integer ``n`` -> ``n + 1`` (``1`` -> ``0``), ``True`` / ``False``;
- ``off_by_one``: a subscript or slice bound or ``range()`` argument moved by one, or a ``± 1`` dropped;
- ``invert_condition``: the test of an ``if`` / ``while`` / conditional expression / comprehension negated;
- ``drop_statement``, ``drop_branch`` (an ``if`` without ``else``, or an ``elif`` / ``else`` clause),
  ``drop_loop``, ``drop_return``: the lines of that statement removed (``pass`` left where a block would
  become empty).

:func:`find_sites` lists every site of every top-level function and method of a file; :func:`apply_edits`
applies one site or a combination of sites in one function (their edits must not overlap).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["BUG_KINDS", "Edit", "Site", "apply_edits", "changes_code", "find_sites", "functions"]

BUG_KINDS = (
    "flip_operator",
    "swap_operands",
    "change_constant",
    "off_by_one",
    "invert_condition",
    "drop_statement",
    "drop_branch",
    "drop_loop",
    "drop_return",
)

_BINOP_FLIP = {
    ast.Add: "-",
    ast.Sub: "+",
    ast.Mult: "//",
    ast.Div: "*",
    ast.FloorDiv: "/",
    ast.Mod: "//",
    ast.Pow: "*",
    ast.LShift: ">>",
    ast.RShift: "<<",
    ast.BitAnd: "|",
    ast.BitOr: "&",
    ast.BitXor: "&",
}
_BINOP_TOKEN = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
_CMP_FLIP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
_CMP_NEGATE = {
    ast.Lt: ("<", ">="),
    ast.LtE: ("<=", ">"),
    ast.Gt: (">", "<="),
    ast.GtE: (">=", "<"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
# operands worth swapping: the order matters (for numbers; + and * swap strings and lists too)
_SWAPPABLE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.Add)


@dataclass(frozen=True)
class Edit:
    """Replace the text from ``start`` to ``end`` (offsets into the file's text) with ``text``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Site:
    """One place a bug of ``kind`` can go in ``function`` (``Class.method`` or ``function``) of a file."""

    kind: str
    function: str
    line: int
    edits: tuple[Edit, ...]

    @property
    def span(self) -> tuple[int, int]:
        """The smallest and largest offsets the site touches."""
        return min(e.start for e in self.edits), max(e.end for e in self.edits)


class _Text:
    """A file's text with (line, column) positions of the AST turned into offsets."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        # the AST's columns count UTF-8 bytes
        raw = self.lines[line - 1].encode("utf-8")[:col]
        return self.starts[line - 1] + len(raw.decode("utf-8", errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The top-level functions and the methods of (nested) top-level classes, with their qualified names."""

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, prefix + node.name + ".")

    yield from walk(tree.body, "")


def _is_docstring(node: ast.AST, parent_body: list) -> bool:
    return (
        bool(parent_body)
        and node is parent_body[0]
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_number(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def _simple(node: ast.AST) -> bool:
    """Whether ``node`` may be written before ``+ 1`` or after ``not`` without parentheses."""
    return isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript | ast.Constant)


def _operator_edit(t: _Text, left: ast.AST, right: ast.AST, old: str, new: str) -> Edit | None:
    """Replace the operator token ``old`` between the end of ``left`` and the start of ``right``."""
    gap_start = t.offset(left.end_lineno, left.end_col_offset)
    gap_end = t.offset(right.lineno, right.col_offset)
    gap = t.text[gap_start:gap_end]
    if "#" in gap:
        return None
    # the token is the one word or symbol run in the gap (parentheses and spaces around it)
    if old in ("not in", "is not"):
        index = gap.find(old.split()[0])
        word_end = gap.find(old.split()[1], index) + len(old.split()[1]) if index >= 0 else -1
        if index < 0 or word_end < 0:
            return None
        return Edit(gap_start + index, gap_start + word_end, new)
    stripped = gap.replace("(", " ").replace(")", " ").replace("\\\n", " ")
    if stripped.split() != [old]:
        return None
    index = gap.find(old)
    return Edit(gap_start + index, gap_start + index + len(old), new)


def _statement_removal(t: _Text, stmt: ast.stmt, body: list, extra_end: ast.AST | None = None) -> Edit | None:
    """Remove the lines of ``stmt`` (through ``extra_end``'s last line); ``pass`` when it was alone in ``body``."""
    last = extra_end or stmt
    first_line = t.lines[stmt.lineno - 1]
    indent = first_line[: len(first_line) - len(first_line.lstrip())]
    # the statement must own its lines: nothing before it on its first line, nothing after it on its last
    if t.offset(stmt.lineno, stmt.col_offset) != t.starts[stmt.lineno - 1] + len(indent):
        return None
    tail = t.text[t.offset(last.end_lineno, last.end_col_offset) : t.starts[last.end_lineno]]
    if tail.strip() and not tail.strip().startswith("#"):
        return None
    start, end = t.starts[stmt.lineno - 1], t.starts[last.end_lineno]
    if len(body) == 1:
        return Edit(start, end, indent + "pass\n")
    return Edit(start, end, "")


class _SiteFinder:
    """Walks one function and lists its sites."""

    def __init__(self, t: _Text, name: str):
        self.t = t
        self.name = name
        self.sites: list[Site] = []

    def add(self, kind: str, node: ast.AST, *edits: Edit | None) -> None:
        if edits and all(e is not None for e in edits):
            self.sites.append(Site(kind, self.name, node.lineno, tuple(edits)))

    def visit_function(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.visit_body(func.body)

    def visit_body(self, body: list) -> None:
        for stmt in body:
            if _is_docstring(stmt, body):
                continue
            self.visit_statement(stmt, body)

    def visit_statement(self, stmt: ast.stmt, body: list) -> None:
        t = self.t
        if isinstance(stmt, ast.Return):
            self.add("drop_return", stmt, _statement_removal(t, stmt, body))
        elif isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            self.add("drop_loop", stmt, _statement_removal(t, stmt, body))
        elif isinstance(stmt, ast.If):
            if not stmt.orelse:
                self.add("drop_branch", stmt, _statement_removal(t, stmt, body))
            else:
                self.add_else_removal(stmt)
        elif isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Raise | ast.Delete):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                self.add("drop_statement", stmt, _statement_removal(t, stmt, body))
        if isinstance(stmt, ast.If | ast.While):
            self.invert(stmt.test)
        if isinstance(stmt, ast.AugAssign) and type(stmt.op) in _BINOP_FLIP:
            self.flip_augassign(stmt)
        # the statement's own expressions, then its blocks (nested functions and classes included)
        for field_name, value in ast.iter_fields(stmt):
            if field_name in ("handlers", "cases"):
                for clause in value:  # except clauses and match cases: their blocks are bodies too
                    self.visit_body(clause.body)
            elif isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                self.visit_body(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit_expression(item)
            elif isinstance(value, ast.AST):
                self.visit_expression(value)

    def add_else_removal(self, stmt: ast.If) -> None:
        """Drop an ``elif`` or ``else`` clause: from its keyword line to the end of the ``if``."""
        t = self.t
        first = stmt.orelse[0]
        if (
            isinstance(first, ast.If)
            and len(stmt.orelse) == 1
            and t.lines[first.lineno - 1].lstrip().startswith("elif")
        ):
            keyword_line = first.lineno
        else:
            keyword_line = None
            for number in range(stmt.body[-1].end_lineno + 1, first.lineno + 1):
                if t.lines[number - 1].lstrip().startswith("else"):
                    keyword_line = number
                    break
            if keyword_line is None:
                return
        end_line = stmt.orelse[-1].end_lineno
        tail = t.text[t.offset(end_line, stmt.orelse[-1].end_col_offset) : t.starts[end_line]]
        if tail.strip() and not tail.strip().startswith("#"):
            return
        self.sites.append(
            Site(
                "drop_branch",
                self.name,
                keyword_line,
                (Edit(t.starts[keyword_line - 1], t.starts[end_line], ""),),
            )
        )

    def invert(self, test: ast.expr) -> None:
        t = self.t
        start, end = t.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner_start, _ = t.span(test.operand)
            self.add("invert_condition", test, Edit(start, inner_start, ""))
        elif isinstance(test, ast.Compare) and len(test.ops) == 1:
            # a single comparison reads naturally inverted: == -> !=, < -> >=, in -> not in
            old, new = _CMP_NEGATE[type(test.ops[0])]
            self.add("invert_condition", test, _operator_edit(t, test.left, test.comparators[0], old, new))
        elif _simple(test):
            self.add("invert_condition", test, Edit(start, start, "not "))
        else:
            self.add("invert_condition", test, Edit(start, start, "not ("), Edit(end, end, ")"))

    def flip_augassign(self, stmt: ast.AugAssign) -> None:
        t = self.t
        old = _BINOP_TOKEN[type(stmt.op)] + "="
        gap_start = t.offset(stmt.target.end_lineno, stmt.target.end_col_offset)
        gap_end = t.offset(stmt.value.lineno, stmt.value.col_offset)
        gap = t.text[gap_start:gap_end]
        if gap.split() == [old]:
            index = gap.find(old)
            self.add(
                "flip_operator",
                stmt,
                Edit(gap_start + index, gap_start + index + len(old), _BINOP_FLIP[type(stmt.op)] + "="),
            )

    def visit_expression(self, node: ast.AST) -> None:
        t = self.t
        for sub in ast.walk(node):
            if isinstance(sub, ast.BinOp) and type(sub.op) in _BINOP_FLIP:
                old = _BINOP_TOKEN[type(sub.op)]
                self.add(
                    "flip_operator",
                    sub,
                    _operator_edit(t, sub.left, sub.right, old, _BINOP_FLIP[type(sub.op)]),
                )
                if isinstance(sub.op, _SWAPPABLE) and not (
                    # '...' % args is string formatting (swapping it only raises); n + 1 is 1 + n
                    (isinstance(sub.op, ast.Mod) and isinstance(sub.left, ast.Constant | ast.JoinedStr))
                    or (isinstance(sub.op, ast.Add) and (_is_number(sub.left) or _is_number(sub.right)))
                ):
                    self.swap(sub, sub.left, sub.right)
                if (
                    isinstance(sub.op, ast.Add | ast.Sub)
                    and isinstance(sub.right, ast.Constant)
                    and sub.right.value == 1
                    and not isinstance(sub.right.value, bool)
                ):
                    left_end = t.offset(sub.left.end_lineno, sub.left.end_col_offset)
                    _, end = t.span(sub)
                    self.add("off_by_one", sub, Edit(left_end, end, ""))
            elif isinstance(sub, ast.Compare) and len(sub.ops) == 1:
                old, new = _CMP_FLIP[type(sub.ops[0])]
                self.add("flip_operator", sub, _operator_edit(t, sub.left, sub.comparators[0], old, new))
                if not isinstance(sub.ops[0], ast.In | ast.NotIn | ast.Is | ast.IsNot):
                    self.swap(sub, sub.left, sub.comparators[0])
            elif isinstance(sub, ast.BoolOp) and len(sub.values) == 2:
                old, new = ("and", "or") if isinstance(sub.op, ast.And) else ("or", "and")
                self.add("flip_operator", sub, _operator_edit(t, sub.values[0], sub.values[1], old, new))
            elif isinstance(sub, ast.Constant):
                self.change_constant(sub)
            elif isinstance(sub, ast.Subscript):
                self.subscript_bound(sub)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "range":
                if sub.args and not sub.keywords:
                    stop = sub.args[0] if len(sub.args) == 1 else sub.args[1]
                    self.shift(stop, "off_by_one", -1 if len(sub.args) == 1 else 1)
            elif isinstance(sub, ast.IfExp):
                self.invert(sub.test)
            elif isinstance(sub, ast.comprehension):
                for cond in sub.ifs:
                    self.invert(cond)

    def swap(self, node: ast.AST, left: ast.AST, right: ast.AST) -> None:
        t = self.t
        (ls, le), (rs, re) = t.span(left), t.span(right)
        left_text, right_text = t.text[ls:le], t.text[rs:re]
        if left_text == right_text or "\n" in left_text or "\n" in right_text:
            return
        self.add("swap_operands", node, Edit(ls, le, right_text), Edit(rs, re, left_text))

    def change_constant(self, const: ast.Constant) -> None:
        t = self.t
        value = const.value
        start, end = t.span(const)
        if isinstance(value, bool):
            self.add("change_constant", const, Edit(start, end, "False" if value else "True"))
        elif isinstance(value, int) and t.text[start:end].isdigit():
            self.add("change_constant", const, Edit(start, end, "0" if value == 1 else str(value + 1)))

    def shift(self, node: ast.AST, kind: str, delta: int) -> None:
        t = self.t
        start, end = t.span(node)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int)
            and not isinstance(node.value, bool)
        ):
            if t.text[start:end].lstrip("-").isdigit():
                self.add(kind, node, Edit(start, end, str(node.value + delta)))
            return
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
        ):
            value = node.operand.value
            if isinstance(value, int) and not isinstance(value, bool):
                self.add(kind, node, Edit(start, end, str(-value + delta)))
            return
        sign = "+" if delta > 0 else "-"
        if _simple(node):
            self.add(kind, node, Edit(end, end, f" {sign} 1"))
        elif isinstance(node, ast.BinOp):
            self.add(kind, node, Edit(start, start, "("), Edit(end, end, f") {sign} 1"))

    def subscript_bound(self, sub: ast.Subscript) -> None:
        index = sub.slice
        if isinstance(index, ast.Slice):
            if index.lower is not None:
                self.shift(index.lower, "off_by_one", 1)
            if index.upper is not None:
                self.shift(index.upper, "off_by_one", -1)
        elif (
            isinstance(index, ast.Constant)
            and isinstance(index.value, int)
            and not isinstance(index.value, bool)
        ):
            self.shift(index, "off_by_one", 1)
        elif isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant):
            self.shift(index, "off_by_one", -1)


def find_sites(source: str, check: bool = True) -> list[Site]:
    """Every bug site of every top-level function and method in ``source``, in source order.

    With ``check`` (the default) only sites whose edit compiles and changes the AST are kept; without it
    the caller checks the sites it uses (:func:`changes_code`), which is much faster on a large file.
    """
    tree = ast.parse(source)
    t = _Text(source)
    original = ast.dump(tree) if check else None
    sites: list[Site] = []
    seen: set[tuple[Edit, ...]] = set()
    for name, func in functions(tree):
        finder = _SiteFinder(t, name)
        finder.visit_function(func)
        for site in finder.sites:
            if site.edits in seen:
                continue
            seen.add(site.edits)
            if not check or changes_code(source, [site], original):
                sites.append(site)
    return sites


def changes_code(source: str, sites: list[Site], original_dump: str | None = None) -> bool:
    """Whether ``sites`` together apply to ``source``, compile, and give a different AST."""
    try:
        new = apply_edits(source, sites)
    except (SyntaxError, ValueError):
        return False
    return ast.dump(ast.parse(new)) != (original_dump or ast.dump(ast.parse(source)))


def apply_edits(source: str, sites: list[Site]) -> str:
    """``source`` with the edits of ``sites`` applied; raises :class:`ValueError` when edits overlap.

    The result is compiled, so a site that would leave invalid Python raises :class:`SyntaxError`.
    """
    edits = sorted((e for site in sites for e in site.edits), key=lambda e: (e.start, e.end))
    for before, after in zip(edits, edits[1:], strict=False):
        if after.start < before.end or after.start == before.start:
            raise ValueError("the edits overlap")
    out, position = [], 0
    for edit in edits:
        out.append(source[position : edit.start])
        out.append(edit.text)
        position = edit.end
    out.append(source[position:])
    new = "".join(out)
    compile(new, "<mutated>", "exec")
    return new
