"""A generated, self-contained world for the CPU preset: fictional people, cities,
countries and organisations written up as short encyclopedia-style documents, and
question families whose answers can only be found by retrieving them.

Names are invented (and every name token is unique), so the model cannot know the
answers from pre-training and a gold query always finds its document. Two-hop families
need two searches: the first document names the bridge entity (a city, a founder) whose
own document holds the answer. Each family is reported as its own sub-dataset.

    world = generate_world(n_people=200, n_orgs=100, seed=0)
    questions = world.questions(world.people[:10], world.orgs[:5])   # list[QAExample]
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import combinations

from whalekit.domains.searchqa.data import Document, QAExample

ONE_HOP = ("birthplace", "occupation", "founded_year")
TWO_HOP = ("birth_country", "founder_birthplace", "org_country", "born_first")
FAMILIES = ONE_HOP + TWO_HOP

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "dr", "gr", "kr", "tr", "st", "th", "sh", "vl", "zh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ia"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "k", "m", "x"]
_OCCUPATIONS = ["painter", "chemist", "sculptor", "architect", "poet", "astronomer", "violinist", "engineer",
                "botanist", "novelist", "cartographer", "physician", "photographer", "mathematician",
                "composer", "geologist", "playwright", "economist", "pianist", "historian"]
_ORG_KINDS = ["record label", "shipping company", "publishing house", "brewery", "theatre company",
              "football club", "bank", "observatory", "textile mill", "airline"]
_RIVERS_ADJ = ["slow", "wide", "cold", "green", "winding", "shallow"]
_WORKS = ["lantern", "harbour", "orchard", "tower", "mirror", "garden", "bridge", "comet", "forest", "window"]
_WORK_ADJ = ["silver", "quiet", "northern", "broken", "golden", "hidden", "endless", "crimson"]


@dataclass(frozen=True)
class Country:
    id: str
    name: str


@dataclass(frozen=True)
class City:
    id: str
    name: str
    country: Country
    river: str
    population: int


@dataclass(frozen=True)
class Person:
    id: str
    first: str
    last: str
    occupation: str
    birth_year: int
    birthplace: City
    work: str

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"


@dataclass(frozen=True)
class Org:
    id: str
    name: str
    kind: str
    founded: int
    founder: Person
    city: City


@dataclass
class World:
    countries: list[Country]
    cities: list[City]
    people: list[Person]
    orgs: list[Org]
    documents: list[Document] = field(default_factory=list)

    def orgs_of(self, people: list[Person]) -> list[Org]:
        """Organisations whose founder is among `people` (they go to the founder's split)."""
        ids = {p.id for p in people}
        return [o for o in self.orgs if o.founder.id in ids]

    def questions(self, people: list[Person], orgs: list[Org]) -> dict[str, list[QAExample]]:
        """Every question about these subjects, by family. Comparisons pair only these people."""
        out: dict[str, list[QAExample]] = {f: [] for f in FAMILIES}

        def add(family: str, key: str, question: str, answers: list[str], hops: list[tuple[str, str]]) -> None:
            meta = {"family": family, "hops": len(hops), "gold_queries": [q for q, _ in hops]}
            out[family].append(QAExample(f"gen-{family}-{key}", question, answers, family,
                                         [d for _, d in hops], meta))

        for p in people:
            add("birthplace", p.id, f"In which city was {p.name} born?", [p.birthplace.name], [(p.name, p.id)])
            add("occupation", p.id, f"What was the occupation of {p.name}?", [p.occupation], [(p.name, p.id)])
            add("birth_country", p.id, f"In which country was {p.name} born?", [p.birthplace.country.name],
                [(p.name, p.id), (p.birthplace.name, p.birthplace.id)])
        for o in orgs:
            add("founded_year", o.id, f"In what year was {o.name} founded?", [str(o.founded)], [(o.name, o.id)])
            add("founder_birthplace", o.id, f"In which city was the founder of {o.name} born?",
                [o.founder.birthplace.name], [(o.name, o.id), (o.founder.name, o.founder.id)])
            add("org_country", o.id, f"In which country is {o.name} based?", [o.city.country.name],
                [(o.name, o.id), (o.city.name, o.city.id)])
        for a, b in combinations(people, 2):
            if a.birth_year == b.birth_year:
                continue
            first = a if a.birth_year < b.birth_year else b
            add("born_first", f"{a.id}-{b.id}", f"Who was born first, {a.name} or {b.name}?",
                [first.name, first.last], [(a.name, a.id), (b.name, b.id)])
        return out


class _Names:
    """Invented words, each unique across the world, so every name token is a key."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        for _ in range(10_000):
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables)]
            word = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if word.lower() not in self.used and len(word) >= 4:
                self.used.add(word.lower())
                return word
        raise RuntimeError("ran out of invented names; lower the world size")


def generate_world(n_people: int = 200, n_orgs: int = 100, n_cities: int = 40, n_countries: int = 8,
                   seed: int = 0) -> World:
    """A deterministic world from its sizes and seed (same arguments, same documents)."""
    if min(n_people, n_cities, n_countries) < 1 or n_orgs < 0:
        raise ValueError("world sizes must be positive")
    rng = random.Random(f"searchqa-world-{seed}")
    names = _Names(rng)
    countries = [Country(f"c{i:02d}", names.word(3)) for i in range(n_countries)]
    cities = [City(f"y{i:03d}", names.word(2), countries[i % n_countries], names.word(2), rng.randint(8, 900) * 1000)
              for i in range(n_cities)]
    people = [Person(f"p{i:03d}", names.word(2), names.word(2), rng.choice(_OCCUPATIONS), rng.randint(1800, 1990),
                     rng.choice(cities), f"The {rng.choice(_WORK_ADJ).capitalize()} {rng.choice(_WORKS).capitalize()}")
              for i in range(n_people)]
    orgs = []
    for i in range(n_orgs):
        founder = rng.choice(people)
        kind = rng.choice(_ORG_KINDS)
        name = f"{names.word(2)} {kind.split()[-1].capitalize()}"
        orgs.append(Org(f"o{i:03d}", name, kind, max(founder.birth_year + rng.randint(20, 50), 1820), founder,
                        rng.choice(cities)))
    world = World(countries, cities, people, orgs)
    world.documents = _documents(world, rng)
    return world


def _documents(world: World, rng: random.Random) -> list[Document]:
    docs = []
    capitals: dict[str, City] = {}
    for city in world.cities:
        capitals.setdefault(city.country.id, city)
    for c in world.countries:
        n_cities = sum(1 for y in world.cities if y.country.id == c.id)
        docs.append(Document(c.id, c.name, f"{c.name} is a country with {n_cities} large cities. "
                                           f"Its capital is {capitals[c.id].name}."))
    for y in world.cities:
        docs.append(Document(y.id, y.name, f"{y.name} is a city in {y.country.name}, on the "
                                           f"{rng.choice(_RIVERS_ADJ)} {y.river} river. It has about "
                                           f"{y.population:,} inhabitants."))
    for p in world.people:
        job = f"{_article(p.occupation)} {p.occupation}"
        docs.append(Document(p.id, p.name, f"{p.name} (born {p.birth_year}) was {job}. {p.last} was born in the "
                                           f"city of {p.birthplace.name}. {p.last} is best known for \"{p.work}\"."))
    for o in world.orgs:
        kind = f"{_article(o.kind)} {o.kind}"
        docs.append(Document(o.id, o.name, f"{o.name} is {kind} founded in {o.founded} by {o.founder.name}. "
                                           f"It is based in {o.city.name}."))
    return docs


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"
