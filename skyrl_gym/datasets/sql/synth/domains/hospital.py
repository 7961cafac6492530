"""A hospital: doctors, patients, appointments, medications and prescriptions."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

SPECIALTIES = ("Cardiology", "Dermatology", "Neurology", "Paediatrics", "Oncology", "Orthopaedics",
               "General Practice", "Psychiatry", "Ophthalmology", "Endocrinology")  # fmt: skip
BLOOD_TYPES = ("O+", "A+", "B+", "AB+", "O-", "A-", "B-", "AB-")
INSURERS = ("Meridian Health", "CarePlus", "Unity Mutual", "Northstar Assurance", "Helios Cover")
MEDICATIONS = ("Amoxicillin", "Ibuprofen", "Metformin", "Atorvastatin", "Lisinopril", "Omeprazole",
               "Amlodipine", "Levothyroxine", "Salbutamol", "Sertraline", "Paracetamol", "Cetirizine",
               "Prednisolone", "Warfarin", "Insulin Glargine", "Azithromycin", "Diclofenac", "Furosemide")  # fmt: skip
MAKERS = ("Helix Pharma", "Norden Labs", "Vita Therapeutics", "Altamed", "Caspian Biotech", "Solis Generics")
STATUSES = ("completed", "cancelled", "no-show")

doctors = Table(
    "doctors", "doctor", "doctors", person=True, label="name", primary_key=("doctor_id",),
    columns=(
        key("doctor_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("specialty", "VARCHAR", kind="cat", noun="specialty", eq=("specialising in {v}", "working in {v}")),
        Column("years_experience", "INTEGER", kind="num", noun="years of experience",
               gt=("with more than {v} years of experience",), lt=("with less than {v} years of experience",),
               top="most experienced", bottom="least experienced"),
        Column("consultation_fee", "DECIMAL(8,2)", kind="money", noun="consultation fee",
               gt=("with a consultation fee above {v}",), lt=("with a consultation fee below {v}",)),
    ),
)  # fmt: skip

patients = Table(
    "patients", "patient", "patients", person=True, label="name", primary_key=("patient_id",),
    columns=(
        key("patient_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("birth_date", "DATE", kind="date", noun="date of birth", when=("born {p}",), tense="were"),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("from {v}", "living in {v}")),
        Column("blood_type", "VARCHAR", kind="cat", noun="blood type", eq=("with blood type {v}",)),
        Column("insurer", "VARCHAR", kind="cat", noun="insurer", nullable=True, eq=("insured with {v}",),
               missing=("without insurance", "with no insurer on file")),
    ),
)  # fmt: skip

appointments = Table(
    "appointments", "appointment", "appointments", label="appointment_id", primary_key=("appointment_id",),
    columns=(
        Column("appointment_id", "INTEGER", kind="id", noun="appointment ID"),
        ref("patient_id", "patients", "patient_id"),
        ref("doctor_id", "doctors", "doctor_id"),
        Column("appointment_date", "DATE", kind="date", noun="date", when=("scheduled {p}",)),
        Column("duration_minutes", "INTEGER", kind="num", noun="duration in minutes", additive=True,
               gt=("longer than {v} minutes",), lt=("shorter than {v} minutes",), top="longest", bottom="shortest"),
        Column("status", "VARCHAR", kind="cat", noun="status", eq=("with status '{v}'",)),
        Column("fee", "DECIMAL(8,2)", kind="money", noun="fee", additive=True,
               gt=("billed more than {v}",), lt=("billed less than {v}",)),
    ),
)  # fmt: skip

medications = Table(
    "medications", "medication", "medications", label="name", primary_key=("medication_id",),
    columns=(
        key("medication_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("manufacturer", "VARCHAR", kind="cat", noun="manufacturer", eq=("made by {v}",)),
        Column("unit_cost", "DECIMAL(8,2)", kind="money", noun="unit cost",
               gt=("with a unit cost above {v}",), lt=("with a unit cost below {v}",),
               top="most expensive", bottom="cheapest"),
    ),
)  # fmt: skip

prescriptions = Table(
    "prescriptions", "prescription", "prescriptions", label="prescription_id", primary_key=("prescription_id",),
    columns=(
        Column("prescription_id", "INTEGER", kind="id", noun="prescription ID"),
        ref("appointment_id", "appointments", "appointment_id"),
        ref("medication_id", "medications", "medication_id"),
        Column("dosage_mg", "INTEGER", kind="num", noun="dosage in mg",
               gt=("with a dosage above {v} mg",), lt=("with a dosage below {v} mg",)),
        Column("days", "INTEGER", kind="num", noun="number of days", additive=True,
               gt=("lasting more than {v} days",), lt=("lasting fewer than {v} days",)),
    ),
)  # fmt: skip


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    specialties = rng.sample(SPECIALTIES, rng.randint(5, len(SPECIALTIES)))
    rows_doctors = []
    for i, name in enumerate(sampling.people(rng, int(30 * scale)), start=1):
        years = max(1, int(rng.gauss(14, 8)))
        fee = sampling.price(rng, 120, 0.35, cents=False)
        rows_doctors.append((i, name, rng.choice(specialties), years, fee))

    end = datetime.date(rng.randint(2022, 2024), 12, 31)
    cities = [c for c, _ in sampling.cities(rng, rng.randint(4, 8))]
    city_weights = sampling.skewed_weights(rng, len(cities), alpha=1.0)
    rows_patients = []
    for i, name in enumerate(sampling.people(rng, int(200 * scale)), start=1):
        born = sampling.date_between(rng, datetime.date(1935, 1, 1), datetime.date(2020, 12, 31))
        blood = rng.choices(BLOOD_TYPES, weights=(38, 34, 9, 3, 7, 6, 2, 1))[0]
        insurer = sampling.maybe(rng, rng.choice(INSURERS), 0.18)
        rows_patients.append((i, name, born, rng.choices(cities, weights=city_weights)[0], blood, insurer))

    drugs = rng.sample(MEDICATIONS, rng.randint(10, len(MEDICATIONS)))
    rows_medications = [
        (i, drug, rng.choice(MAKERS), sampling.price(rng, 3.5, 0.9)) for i, drug in enumerate(drugs, start=1)
    ]

    doctor_weights = sampling.skewed_weights(rng, len(rows_doctors), alpha=1.5, idle=0.05)
    patient_weights = sampling.skewed_weights(rng, len(rows_patients), alpha=1.2, idle=0.1)
    drug_weights = sampling.skewed_weights(rng, len(rows_medications), alpha=1.2, idle=0.1)
    rows_appointments, rows_prescriptions = [], []
    for i in range(1, int(600 * scale) + 1):
        patient = rng.choices(rows_patients, weights=patient_weights)[0]
        doctor = rng.choices(rows_doctors, weights=doctor_weights)[0]
        day = sampling.date_between(rng, datetime.date(end.year - 3, 1, 1), end)
        status = rng.choices(STATUSES, weights=(84, 10, 6))[0]
        minutes = rng.choice((15, 15, 20, 30, 30, 45, 60))
        fee = doctor[4] if status == "completed" else 0.0
        rows_appointments.append((i, patient[0], doctor[0], day, minutes, status, fee))
        if status == "completed" and rng.random() < 0.45:
            drugs = {
                rng.choices(rows_medications, weights=drug_weights)[0][0] for _ in range(rng.randint(1, 3))
            }
            for drug in sorted(drugs):
                dosage = rng.choice((5, 10, 20, 50, 100, 250, 500))
                days = rng.choice((3, 5, 7, 10, 14, 30, 90))
                rows_prescriptions.append((len(rows_prescriptions) + 1, i, drug, dosage, days))
    rows_appointments, new_id = sampling.renumber(rows_appointments, 3)
    rows_prescriptions = [(row[0], new_id[row[1]], *row[2:]) for row in rows_prescriptions]
    rows_prescriptions, _ = sampling.renumber(rows_prescriptions, 1)

    return {
        "doctors": rows_doctors,
        "patients": rows_patients,
        "appointments": rows_appointments,
        "medications": rows_medications,
        "prescriptions": rows_prescriptions,
    }


DOMAIN = Domain(
    name="hospital",
    description="a hospital: doctors, patients, appointments, medications and prescriptions",
    tables=(doctors, patients, appointments, medications, prescriptions),
    links=(
        Link("appointments", "patient_id", "patients", verb="had", by="of", never="have never had an appointment",
             when="appointment_date"),
        Link("appointments", "doctor_id", "doctors", verb="had", by="with", never="have no appointments",
             when="appointment_date"),
        Link("prescriptions", "medication_id", "medications", verb="appear in", by="for",
             never="have never been prescribed"),
        Link("prescriptions", "appointment_id", "appointments", verb="led to", by="from",
             never="led to no prescription"),
    ),
    bridges=(Bridge("appointments", "patients", "patient_id", "doctors", "doctor_id", verb="saw", by="seen by"),),
    populate=populate,
)  # fmt: skip
