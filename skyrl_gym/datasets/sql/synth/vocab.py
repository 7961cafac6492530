"""Word lists shared by the domains: people's names, cities and their countries, street names.

Domain-specific lists (product catalogues, course titles, aircraft models...) live in the domain modules.
"""

from __future__ import annotations

FIRST_NAMES = (
    "Aaliyah", "Abdul", "Adele", "Ahmed", "Aiko", "Alejandro", "Alice", "Amara", "Amir", "Ana", "Andrei",
    "Anika", "Arjun", "Astrid", "Beatriz", "Ben", "Bianca", "Bruno", "Camille", "Carlos", "Chen", "Chiara",
    "Chloe", "Daniel", "Daria", "David", "Diego", "Dmitri", "Elena", "Elif", "Emeka", "Emma", "Esi", "Ethan",
    "Fatima", "Felix", "Finn", "Freya", "Gabriel", "Grace", "Hana", "Hannah", "Hassan", "Hiro", "Ines",
    "Ingrid", "Isabel", "Ivan", "Jack", "Jamal", "Javier", "Jin", "Johan", "Jonas", "Julia", "Kai", "Kavya",
    "Kenji", "Khadija", "Lars", "Laura", "Leila", "Leon", "Liam", "Lina", "Lucas", "Luis", "Maja", "Malik",
    "Marco", "Maria", "Mateo", "Mei", "Mia", "Mohammed", "Nadia", "Naomi", "Nikolai", "Nina", "Noah", "Nora",
    "Olivia", "Omar", "Oscar", "Paolo", "Pedro", "Priya", "Rafael", "Rahul", "Rosa", "Ruth", "Sami", "Sara",
    "Sebastian", "Sofia", "Sven", "Tariq", "Teresa", "Thomas", "Tomasz", "Uma", "Valentina", "Vera",
    "Victor", "Wei", "Yara", "Yusuf", "Zainab", "Zoe",
)  # fmt: skip

LAST_NAMES = (
    "Abe", "Adeyemi", "Alvarez", "Andersen", "Bauer", "Becker", "Bianchi", "Brown", "Castro", "Chen",
    "Costa", "Dubois", "Eriksson", "Fernandes", "Fischer", "Garcia", "Gomez", "Gonzalez", "Haddad", "Hansen",
    "Hoffmann", "Horvat", "Ibrahim", "Ito", "Jansen", "Jensen", "Kaur", "Khan", "Kim", "Kowalski", "Kumar",
    "Larsen", "Laurent", "Lee", "Lindqvist", "Lopez", "Martin", "Martinez", "Mendes", "Meyer", "Moreau",
    "Moreno", "Muller", "Murphy", "Nakamura", "Nguyen", "Nielsen", "Novak", "O'Brien", "O'Connor", "Okafor",
    "Olsen", "Park", "Patel", "Perez", "Petrov", "Popescu", "Ramirez", "Reyes", "Ricci", "Rossi", "Russo",
    "Sato", "Schmidt", "Schneider", "Silva", "Singh", "Smith", "Sousa", "Suzuki", "Tanaka", "Taylor",
    "Thompson", "Torres", "Van Dijk", "Vargas", "Wagner", "Walker", "Wang", "Weber", "Williams", "Wilson",
    "Wong", "Yamamoto", "Yilmaz", "Zhang", "Zielinski",
)  # fmt: skip

CITIES = (
    ("Lyon", "France"), ("Paris", "France"), ("Marseille", "France"), ("Toulouse", "France"),
    ("Berlin", "Germany"), ("Munich", "Germany"), ("Hamburg", "Germany"), ("Cologne", "Germany"),
    ("Madrid", "Spain"), ("Barcelona", "Spain"), ("Valencia", "Spain"), ("Seville", "Spain"),
    ("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Rome", "Italy"), ("Milan", "Italy"), ("Naples", "Italy"),
    ("Turin", "Italy"), ("Amsterdam", "Netherlands"), ("Rotterdam", "Netherlands"), ("Utrecht", "Netherlands"),
    ("Brussels", "Belgium"), ("Antwerp", "Belgium"), ("Vienna", "Austria"), ("Zurich", "Switzerland"),
    ("Geneva", "Switzerland"), ("Stockholm", "Sweden"), ("Gothenburg", "Sweden"), ("Oslo", "Norway"),
    ("Copenhagen", "Denmark"), ("Helsinki", "Finland"), ("Dublin", "Ireland"), ("Cork", "Ireland"),
    ("London", "United Kingdom"), ("Manchester", "United Kingdom"), ("Edinburgh", "United Kingdom"),
    ("Bristol", "United Kingdom"), ("Warsaw", "Poland"), ("Krakow", "Poland"), ("Prague", "Czech Republic"),
    ("Budapest", "Hungary"), ("Athens", "Greece"), ("Istanbul", "Turkey"), ("New York", "United States"),
    ("Chicago", "United States"), ("Boston", "United States"), ("Seattle", "United States"),
    ("Austin", "United States"), ("Denver", "United States"), ("San Francisco", "United States"),
    ("Atlanta", "United States"), ("Toronto", "Canada"), ("Montreal", "Canada"), ("Vancouver", "Canada"),
    ("Mexico City", "Mexico"), ("Guadalajara", "Mexico"), ("São Paulo", "Brazil"), ("Rio de Janeiro", "Brazil"),
    ("Buenos Aires", "Argentina"), ("Santiago", "Chile"), ("Lima", "Peru"), ("Bogotá", "Colombia"),
    ("Tokyo", "Japan"), ("Osaka", "Japan"), ("Seoul", "South Korea"), ("Busan", "South Korea"),
    ("Singapore", "Singapore"), ("Sydney", "Australia"), ("Melbourne", "Australia"),
    ("Auckland", "New Zealand"), ("Cape Town", "South Africa"), ("Johannesburg", "South Africa"),
    ("Nairobi", "Kenya"), ("Lagos", "Nigeria"), ("Cairo", "Egypt"), ("Mumbai", "India"),
    ("Bangalore", "India"), ("Delhi", "India"),
)  # fmt: skip
"""(city, country) pairs."""

STREETS = (
    "Oak Street", "Maple Avenue", "Harbour Road", "Station Road", "Church Lane", "Mill Street", "Park Avenue",
    "River Walk", "Elm Close", "King Street", "Queen's Road", "Victoria Street", "Bridge Street",
    "Market Square", "Garden Lane", "Hill Road", "Lake View", "Cedar Drive", "Chestnut Grove", "North Parade",
    "Rue Victor Hugo", "Calle Mayor", "Via Roma", "Hauptstrasse", "Kerkstraat", "Avenida Central",
)  # fmt: skip

NEEDS_THE = frozenset({"Netherlands", "United States", "United Kingdom", "Czech Republic"})
"""Country names that take "the" in a sentence ("customers from the Netherlands")."""

EMAIL_DOMAINS = ("mail.com", "inbox.net", "post.org", "webmail.io", "example.com", "letterbox.eu")

NATIONALITIES = (
    "France", "Germany", "Spain", "Portugal", "Italy", "Netherlands", "Sweden", "Norway", "Ireland",
    "United Kingdom", "Poland", "Greece", "Turkey", "United States", "Canada", "Mexico", "Brazil",
    "Argentina", "Chile", "Japan", "South Korea", "Australia", "Nigeria", "Kenya", "India", "China", "Egypt",
)  # fmt: skip
