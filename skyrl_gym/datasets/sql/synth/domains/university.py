"""A university: departments, instructors, students, courses and enrollments."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

COURSES = {
    "Physics": ("Classical Mechanics", "Quantum Physics", "Thermodynamics", "Electromagnetism", "Optics",
                "Astrophysics", "Introduction to Physics", "Solid State Physics", "Particle Physics"),
    "Mathematics": ("Linear Algebra", "Real Analysis", "Number Theory", "Probability", "Topology",
                    "Calculus I", "Calculus II", "Differential Equations", "Graph Theory"),
    "Computer Science": ("Data Structures", "Algorithms", "Operating Systems", "Databases", "Compilers",
                         "Machine Learning", "Computer Networks", "Programming in Python", "Computer Security"),
    "History": ("Ancient Rome", "Medieval Europe", "The Industrial Revolution", "History of Japan",
                "The Cold War", "Colonial Latin America", "World War I", "History of Science"),
    "Biology": ("Cell Biology", "Genetics", "Ecology", "Microbiology", "Evolution", "Marine Biology",
                "Human Physiology", "Botany"),
    "Chemistry": ("Organic Chemistry", "Inorganic Chemistry", "Physical Chemistry", "Biochemistry",
                  "Analytical Chemistry", "Polymer Science", "General Chemistry"),
    "Economics": ("Microeconomics", "Macroeconomics", "Econometrics", "Game Theory", "Labour Economics",
                  "International Trade", "Public Finance", "Development Economics"),
    "Philosophy": ("Ethics", "Logic", "Philosophy of Mind", "Epistemology", "Political Philosophy",
                   "Ancient Philosophy", "Aesthetics"),
    "Music": ("Music Theory", "Harmony and Counterpoint", "Orchestration", "Jazz Improvisation",
              "History of Opera", "Composition"),
    "Psychology": ("Cognitive Psychology", "Developmental Psychology", "Social Psychology",
                   "Research Methods", "Neuropsychology", "Clinical Psychology"),
}  # fmt: skip

BUILDINGS = ("Turing Hall", "Curie Building", "Newton Wing", "Hypatia Hall", "Franklin Center",
             "Lovelace Building", "Darwin House", "Austen Hall", "Noether Tower")  # fmt: skip
RANKS = ("Lecturer", "Assistant Professor", "Associate Professor", "Professor")
LEVELS = ("introductory", "intermediate", "advanced", "graduate")
GRADES = ("A", "B", "C", "D", "F")

departments = Table(
    "departments", "department", "departments", label="name", primary_key=("dept_id",),
    columns=(
        key("dept_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("building", "VARCHAR", kind="cat", noun="building", eq=("housed in {v}", "located in {v}")),
        Column("budget", "DECIMAL(12,2)", kind="money", noun="budget", additive=True,
               gt=("with a budget above {v}",), lt=("with a budget below {v}",)),
        Column("founded_year", "INTEGER", kind="year", noun="founding year", eq=("founded in {v}",),
               gt=("founded after {v}",), lt=("founded before {v}",), tense="were", top="youngest", bottom="oldest"),
    ),
)  # fmt: skip

instructors = Table(
    "instructors", "instructor", "instructors", person=True, label="name", primary_key=("instructor_id",),
    columns=(
        key("instructor_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        ref("dept_id", "departments", "dept_id"),
        Column("rank", "VARCHAR", kind="cat", noun="rank", eq=("with the rank of {v}", "holding the rank {v}")),
        Column("salary", "DECIMAL(10,2)", kind="money", noun="salary", additive=True,
               gt=("earning more than {v}", "with a salary above {v}"), lt=("earning less than {v}",),
               top="best-paid", bottom="lowest-paid"),
        Column("hire_date", "DATE", kind="date", noun="hire date", when=("hired {p}",), tense="were"),
    ),
)  # fmt: skip

students = Table(
    "students", "student", "students", person=True, label="name", primary_key=("student_id",),
    columns=(
        key("student_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        ref("major_dept_id", "departments", "dept_id", nullable=True),
        Column("enrollment_year", "INTEGER", kind="year", noun="enrollment year", eq=("who enrolled in {v}",),
               gt=("who enrolled after {v}",), lt=("who enrolled before {v}",)),
        Column("gpa", "DECIMAL(3,2)", kind="num", noun="GPA", nullable=True,
               gt=("with a GPA above {v}",), lt=("with a GPA below {v}",), missing=("with no GPA yet",)),
        Column("home_city", "VARCHAR", kind="cat", noun="home city", eq=("from {v}",)),
    ),
)  # fmt: skip

courses = Table(
    "courses", "course", "courses", label="title", primary_key=("course_id",),
    columns=(
        key("course_id"),
        Column("title", "VARCHAR", kind="label", noun="title", quote=True),
        ref("dept_id", "departments", "dept_id"),
        ref("instructor_id", "instructors", "instructor_id", nullable=True),
        Column("credits", "INTEGER", kind="num", noun="number of credits",
               gt=("worth more than {v} credits",), lt=("worth fewer than {v} credits",)),
        Column("level", "VARCHAR", kind="cat", noun="level", eq=("at the {v} level",)),
        Column("capacity", "INTEGER", kind="num", noun="capacity", additive=True,
               gt=("with room for more than {v} students",), lt=("with room for fewer than {v} students",)),
    ),
)  # fmt: skip

enrollments = Table(
    "enrollments", "enrollment", "enrollments", primary_key=("student_id", "course_id", "semester"),
    columns=(
        ref("student_id", "students", "student_id"),
        ref("course_id", "courses", "course_id"),
        Column("semester", "VARCHAR", kind="cat", noun="semester", eq=("in the {v} semester",)),
        Column("grade", "VARCHAR", kind="cat", noun="grade", nullable=True, eq=("with grade {v}",),
               missing=("with no grade yet", "still ungraded")),
    ),
)  # fmt: skip


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    first_year = rng.randint(2015, 2019)
    names = rng.sample(sorted(COURSES), rng.randint(6, len(COURSES)))
    buildings = rng.sample(BUILDINGS, rng.randint(3, 6))
    rows_departments = []
    for i, name in enumerate(names, start=1):
        budget = sampling.price(rng, 900_000, 0.5, cents=False)
        rows_departments.append((i, name, rng.choice(buildings), budget, rng.randint(1890, 2005)))

    dept_weights = sampling.skewed_weights(rng, len(rows_departments), alpha=1.8)
    rows_instructors = []
    for i, name in enumerate(sampling.people(rng, int(45 * scale)), start=1):
        dept = rng.choices(rows_departments, weights=dept_weights)[0][0]
        rank = rng.choices(RANKS, weights=(30, 30, 22, 18))[0]
        base = {"Lecturer": 52_000, "Assistant Professor": 68_000, "Associate Professor": 85_000}.get(
            rank, 110_000
        )
        salary = round(base * rng.uniform(0.85, 1.25), -2)
        hired = sampling.date_between(rng, datetime.date(1995, 1, 1), datetime.date(first_year + 4, 8, 31))
        rows_instructors.append((i, name, dept, rank, salary, hired))

    cities = [c for c, _ in sampling.cities(rng, rng.randint(6, 12))]
    city_weights = sampling.skewed_weights(rng, len(cities), alpha=1.2)
    rows_students = []
    for i, name in enumerate(sampling.people(rng, int(220 * scale)), start=1):
        major = sampling.maybe(rng, rng.choices(rows_departments, weights=dept_weights)[0][0], 0.12)
        year = rng.randint(first_year, first_year + 4)
        gpa = sampling.maybe(rng, round(min(4.0, max(1.2, rng.gauss(3.0, 0.45))), 2), 0.1)
        rows_students.append((i, name, major, year, gpa, rng.choices(cities, weights=city_weights)[0]))

    rows_courses = []
    teachers: dict[int, list[int]] = {}
    for instructor in rows_instructors:
        teachers.setdefault(instructor[2], []).append(instructor[0])
    for dept_id, dept_name, *_ in rows_departments:
        for title in rng.sample(COURSES[dept_name], rng.randint(4, len(COURSES[dept_name]))):
            teacher = rng.choice(teachers[dept_id]) if dept_id in teachers and rng.random() > 0.1 else None
            credits = rng.choices((2, 3, 4, 5, 6), weights=(10, 30, 35, 15, 10))[0]
            level = rng.choices(LEVELS, weights=(30, 35, 25, 10))[0]
            capacity = rng.choice((20, 25, 30, 40, 60, 80, 120, 200))
            rows_courses.append((len(rows_courses) + 1, title, dept_id, teacher, credits, level, capacity))

    semesters = [
        f"{season} {year}" for year in range(first_year, first_year + 5) for season in ("Spring", "Fall")
    ]
    course_weights = sampling.skewed_weights(rng, len(rows_courses), alpha=1.2, idle=0.08)
    seen: set[tuple[int, int, str]] = set()
    rows_enrollments = []
    for student in rows_students:
        for _ in range(rng.choices((0, 1, 2, 3, 4, 5, 6), weights=(6, 10, 16, 22, 22, 14, 10))[0]):
            course = rng.choices(rows_courses, weights=course_weights)[0][0]
            semester = rng.choice([s for s in semesters if int(s[-4:]) >= student[3]])
            if (student[0], course, semester) in seen:
                continue
            seen.add((student[0], course, semester))
            grade = sampling.maybe(rng, rng.choices(GRADES, weights=(25, 35, 25, 10, 5))[0], 0.12)
            rows_enrollments.append((student[0], course, semester, grade))

    return {
        "departments": rows_departments,
        "instructors": rows_instructors,
        "students": rows_students,
        "courses": rows_courses,
        "enrollments": rows_enrollments,
    }


DOMAIN = Domain(
    name="university",
    description="a university: departments, instructors, students, courses and enrollments",
    tables=(departments, instructors, students, courses, enrollments),
    links=(
        Link("instructors", "dept_id", "departments", verb="employ", by="in", never="have no instructors"),
        Link("students", "major_dept_id", "departments", verb="have", by="majoring in",
             never="have no students majoring in them"),
        Link("courses", "dept_id", "departments", verb="offer", by="offered by", never="offer no courses"),
        Link("courses", "instructor_id", "instructors", verb="teach", by="taught by", never="teach no courses"),
        Link("enrollments", "course_id", "courses", verb="have", by="in", never="have no enrollments"),
    ),
    bridges=(
        Bridge("enrollments", "students", "student_id", "courses", "course_id", verb="took", by="taken by"),
    ),
    populate=populate,
)  # fmt: skip
