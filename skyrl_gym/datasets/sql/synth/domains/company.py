"""A company: departments, employees (with their managers), projects and project assignments."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

DEPARTMENTS = ("Engineering", "Marketing", "Sales", "Finance", "Human Resources", "Operations", "Legal",
               "Customer Support", "Research", "Design", "Logistics", "Procurement")  # fmt: skip
JOBS = {  # job title -> median salary
    "Software Engineer": 82_000, "Data Analyst": 64_000, "Product Manager": 95_000, "Designer": 60_000,
    "Sales Representative": 52_000, "Accountant": 58_000, "Recruiter": 50_000, "Technician": 46_000,
    "Team Lead": 98_000, "Consultant": 72_000, "Administrator": 42_000,
}  # fmt: skip
PROJECT_NAMES = ("Aurora", "Falcon", "Northstar", "Beacon", "Cobalt", "Horizon", "Juniper", "Kestrel", "Lumen",
                 "Mosaic", "Nimbus", "Orchid", "Pioneer", "Quartz", "Redwood", "Sapphire", "Tundra", "Vanguard",
                 "Willow", "Zephyr", "Atlas", "Meridian", "Helios", "Ember")  # fmt: skip
PROJECT_STATUSES = ("planned", "active", "completed", "on hold")
ROLES = ("lead", "developer", "reviewer", "analyst", "consultant")

departments = Table(
    "departments", "department", "departments", label="name", primary_key=("department_id",),
    columns=(
        key("department_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("located in {v}", "based in {v}")),
        Column("budget", "DECIMAL(12,2)", kind="money", noun="budget", additive=True,
               gt=("with a budget above {v}",), lt=("with a budget below {v}",)),
    ),
)  # fmt: skip

employees = Table(
    "employees", "employee", "employees", person=True, label="name", primary_key=("employee_id",),
    columns=(
        key("employee_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        ref("department_id", "departments", "department_id"),
        ref("manager_id", "employees", "employee_id", nullable=True),
        Column("job_title", "VARCHAR", kind="cat", noun="job title", eq=("with the job title '{v}'",)),
        Column("salary", "DECIMAL(10,2)", kind="money", noun="salary", additive=True,
               gt=("earning more than {v}", "with a salary above {v}"),
               lt=("earning less than {v}", "with a salary below {v}"), top="best-paid", bottom="lowest-paid"),
        Column("hire_date", "DATE", kind="date", noun="hire date", when=("hired {p}",), tense="were"),
        Column("remote", "BOOLEAN", kind="flag", noun="remote", eq=("working remotely",)),
    ),
)  # fmt: skip

projects = Table(
    "projects", "project", "projects", label="name", primary_key=("project_id",),
    columns=(
        key("project_id"),
        Column("name", "VARCHAR", kind="label", noun="name", quote=True),
        ref("department_id", "departments", "department_id"),
        Column("start_date", "DATE", kind="date", noun="start date", when=("started {p}",), tense="were"),
        Column("budget", "DECIMAL(12,2)", kind="money", noun="budget", additive=True,
               gt=("with a budget above {v}",), lt=("with a budget below {v}",)),
        Column("status", "VARCHAR", kind="cat", noun="status", eq=("with status '{v}'",)),
    ),
)  # fmt: skip

assignments = Table(
    "assignments", "assignment", "assignments", primary_key=("employee_id", "project_id"),
    columns=(
        ref("employee_id", "employees", "employee_id"),
        ref("project_id", "projects", "project_id"),
        Column("role", "VARCHAR", kind="cat", noun="role", eq=("with the role '{v}'",)),
        Column("hours_per_week", "INTEGER", kind="num", noun="weekly hours", additive=True,
               gt=("for more than {v} hours a week",), lt=("for fewer than {v} hours a week",)),
    ),
)  # fmt: skip


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    places = [c for c, _ in sampling.cities(rng, rng.randint(2, 5))]
    names = rng.sample(DEPARTMENTS, rng.randint(6, len(DEPARTMENTS)))
    rows_departments = [
        (i, name, rng.choice(places), sampling.price(rng, 1_500_000, 0.6, cents=False))
        for i, name in enumerate(names, start=1)
    ]
    founded = datetime.date(rng.randint(2005, 2014), 1, 1)
    today = datetime.date(rng.randint(2022, 2024), 6, 30)
    dept_weights = sampling.skewed_weights(rng, len(rows_departments), alpha=1.4)
    jobs = sorted(JOBS)
    job_weights = sampling.skewed_weights(rng, len(jobs), alpha=1.5)
    rows_employees: list[tuple[Any, ...]] = []
    heads: dict[int, int] = {}
    for i, name in enumerate(sampling.people(rng, int(160 * scale)), start=1):
        dept = rng.choices(rows_departments, weights=dept_weights)[0][0]
        job = "Team Lead" if dept not in heads else rng.choices(jobs, weights=job_weights)[0]
        manager = heads.get(dept)
        if manager is None:
            heads[dept] = i
        salary = round(JOBS[job] * rng.uniform(0.8, 1.3), -2)
        hired = sampling.date_between(rng, founded, today)
        rows_employees.append((i, name, dept, manager, job, salary, hired, rng.random() < 0.25))

    project_weights = sampling.skewed_weights(rng, len(rows_departments), alpha=1.2, idle=0.2)
    rows_projects = []
    for i, name in enumerate(
        rng.sample(PROJECT_NAMES, min(len(PROJECT_NAMES), int(18 * scale) + 2)), start=1
    ):
        dept = rng.choices(rows_departments, weights=project_weights)[0][0]
        started = sampling.date_between(rng, founded, today)
        status = rng.choices(PROJECT_STATUSES, weights=(15, 45, 30, 10))[0]
        budget = sampling.price(rng, 250_000, 0.8, cents=False)
        rows_projects.append((i, name, dept, started, budget, status))

    staff_weights = sampling.skewed_weights(rng, len(rows_employees), alpha=1.5, idle=0.3)
    rows_assignments = []
    seen: set[tuple[int, int]] = set()
    for project in rows_projects:
        team: list[int] = []
        for _ in range(rng.randint(2, 12)):
            employee = rng.choices(rows_employees, weights=staff_weights)[0][0]
            if (employee, project[0]) in seen:
                continue
            seen.add((employee, project[0]))
            role = rng.choices(ROLES, weights=(5, 45, 20, 20, 10))[0] if team else "lead"
            team.append(employee)
            rows_assignments.append((employee, project[0], role, rng.choice((4, 8, 10, 16, 20, 24, 32, 40))))

    return {
        "departments": rows_departments,
        "employees": rows_employees,
        "projects": rows_projects,
        "assignments": rows_assignments,
    }


DOMAIN = Domain(
    name="company",
    description="a company: departments, employees and their managers, projects and assignments",
    tables=(departments, employees, projects, assignments),
    links=(
        Link("employees", "department_id", "departments", verb="employ", by="working in",
             never="have no employees"),
        Link("projects", "department_id", "departments", verb="run", by="run by", never="run no projects"),
        Link("assignments", "project_id", "projects", verb="have", by="on", never="have nobody assigned",
             child_words=("assigned employee", "assigned employees")),
        Link("assignments", "employee_id", "employees", verb="have", by="of", never="are not assigned to any project",
             child_words=("project assignment", "project assignments")),
    ),
    bridges=(
        Bridge("assignments", "employees", "employee_id", "projects", "project_id", verb="work on",
               by="staffed by"),
    ),
    populate=populate,
)  # fmt: skip
