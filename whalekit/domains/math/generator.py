"""Fresh math problems with answers we can trust, so the CPU preset needs no download
and the difficulty mix can be tuned to the model (a 135M model needs easy problems
to have anything to learn from).

Five families, roughly in order of difficulty: `arithmetic` (two small numbers, one
operation: a times table, small sums, non-negative differences), `multistep` (three
numbers, two operations), `word` (short stories over the same arithmetic), `modular`
(remainders and modular powers: easy with Python, hard without), `algebra` (linear
equations, quadratic root sums, function values; answers computed with sympy). Every
problem is a pure function of (family, rng), so a seed reproduces the pool exactly.

    problems = generate_problems(200, seed=0, mix={"arithmetic": 0.5, "word": 0.5})
    problems[0].question, problems[0].answer   # ('A box holds 5 books. How many books are in 7 boxes?', '35')
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

FAMILIES = ("arithmetic", "multistep", "word", "modular", "algebra")

NAMES = ("Ana", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kemal", "Lena", "Maya",
         "Nils", "Omar", "Priya", "Rosa", "Sam", "Tariq", "Uma")
ITEMS = ("apples", "books", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "cards", "coins")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # exact answer as a string math-verify can parse (an integer or p/q)
    family: str
    level: int  # 1 (easiest) .. 4


# Level-1 operands: the range where SmolLM2-135M sometimes answers without a tool (a
# times table, small sums, differences that stay non-negative). Larger ones score ~0.
TIMES_TABLE_MAX = 10
SUM_MAX = 20


def _arithmetic(rng: random.Random) -> Problem:
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(2, TIMES_TABLE_MAX), rng.randint(2, TIMES_TABLE_MAX)
    elif op == "+":
        a, b = rng.randint(2, SUM_MAX), rng.randint(2, SUM_MAX)
    else:
        a = rng.randint(3, SUM_MAX)
        b = rng.randint(1, a - 1)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Problem(f"What is {a} {op} {b}?", str(value), "arithmetic", 1)


def _multistep(rng: random.Random) -> Problem:
    a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 12)
    form = rng.randrange(4)
    if form == 0:
        text, value = f"({a} + {b}) * {c}", (a + b) * c
    elif form == 1:
        text, value = f"{a} * {c} - {b}", a * c - b
    elif form == 2:
        text, value = f"{a} + {b} * {c}", a + b * c
    else:
        text, value = f"({a} - {b}) * {c}", (a - b) * c
    return Problem(f"What is {text}?", str(value), "multistep", 2)


def _word(rng: random.Random) -> Problem:
    name, items = rng.choice(NAMES), rng.choice(ITEMS)
    form = rng.randrange(5)
    if form == 0:
        a, b = rng.randint(5, 40), rng.randint(2, 20)
        c = rng.randint(1, a + b - 1)
        text = f"{name} has {a} {items}, gets {b} more and then gives away {c}. How many {items} does {name} have now?"
        value = a + b - c
    elif form == 1:
        a, b = rng.randint(3, 15), rng.randint(2, 12)
        text = f"A box holds {a} {items}. How many {items} are in {b} boxes?"
        value = a * b
    elif form == 2:
        a, b, c = rng.randint(5, 30), rng.randint(2, 9), rng.randint(1, 20)
        text = f"{name} reads {a} pages a day for {b} days and then {c} more pages. How many pages is that in total?"
        value = a * b + c
    elif form == 3:
        b, each = rng.randint(2, 9), rng.randint(2, 15)
        text = f"{b * each} {items} are shared equally among {b} friends. How many {items} does each friend get?"
        value = each
    else:
        price, count = rng.randint(2, 20), rng.randint(2, 6)
        paid = price * count + rng.randint(1, 30)
        text = (f"A notebook costs {price} dollars. {name} buys {count} notebooks and pays with {paid} dollars. "
                f"How many dollars of change does {name} get?")
        value = paid - price * count
    return Problem(text, str(value), "word", 2)


def _modular(rng: random.Random) -> Problem:
    if rng.random() < 0.5:
        a, m = rng.randint(100, 9999), rng.randint(3, 30)
        return Problem(f"What is the remainder when {a} is divided by {m}?", str(a % m), "modular", 3)
    base, exponent, m = rng.randint(2, 12), rng.randint(5, 40), rng.randint(3, 20)
    return Problem(f"What is {base}^{exponent} mod {m}?", str(pow(base, exponent, m)), "modular", 3)


def _algebra(rng: random.Random) -> Problem:
    import sympy

    x = sympy.Symbol("x")
    form = rng.randrange(3)
    if form == 0:
        a, b, solution = rng.randint(2, 12), rng.randint(-20, 20), rng.randint(-15, 15)
        c = a * solution + b
        (root,) = sympy.solve(sympy.Eq(a * x + b, c), x)
        sign = "+" if b >= 0 else "-"
        return Problem(f"Solve for x: {a}x {sign} {abs(b)} = {c}.", str(root), "algebra", 4)
    if form == 1:
        r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
        poly = sympy.expand((x - r1) * (x - r2))
        total = sum(sympy.roots(sympy.Poly(poly, x), multiple=True))
        text = sympy.sstr(poly).replace("**", "^").replace("*", "")
        return Problem(f"What is the sum of the roots (with multiplicity) of {text} = 0?", str(total), "algebra", 4)
    a, b, c, at = rng.randint(1, 6), rng.randint(-10, 10), rng.randint(-10, 10), rng.randint(-5, 5)
    f = a * x**2 + b * x + c
    text = sympy.sstr(f).replace("**", "^").replace("*", "")
    return Problem(f"If f(x) = {text}, what is f({at})?", str(f.subs(x, at)), "algebra", 4)


_BUILDERS: dict[str, Callable[[random.Random], Problem]] = {
    "arithmetic": _arithmetic, "multistep": _multistep, "word": _word, "modular": _modular, "algebra": _algebra,
}


def check_mix(mix: dict[str, float]) -> dict[str, float]:
    """Normalise a family -> weight mapping, naming any unknown family."""
    unknown = sorted(set(mix) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown problem families {unknown}; known: {', '.join(FAMILIES)}")
    total = sum(mix.values())
    if total <= 0 or any(w < 0 for w in mix.values()):
        raise ValueError(f"mix weights must be non-negative and not all zero: {mix}")
    return {family: weight / total for family, weight in mix.items() if weight > 0}


def generate_problems(n: int, seed: int, mix: dict[str, float]) -> list[Problem]:
    """`n` problems with distinct question texts, families drawn by `mix` weights."""
    weights = check_mix(mix)
    families = list(weights)
    rng = random.Random(f"whalekit-math-{seed}")
    seen: set[str] = set()
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not generate {n} distinct problems from mix {mix}")
        problem = _BUILDERS[rng.choices(families, [weights[f] for f in families])[0]](rng)
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    return problems
