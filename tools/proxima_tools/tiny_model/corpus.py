"""The in-code training corpus: seeded English-like sentences, questions and fixed lines."""

from __future__ import annotations

import random

from proxima_tools.tiny_model.recipe import CORPUS_LINES, CORPUS_SEED


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_NOUNS = _words(
    "cat dog bird fish horse river mountain city village garden house window door "
    "table chair book letter story song voice teacher student doctor farmer baker "
    "sailor pilot engineer writer painter child friend neighbour king queen road "
    "bridge tower forest field cloud rain storm wind sun moon star sky ocean island "
    "ship train car bicycle clock lamp candle kitchen bread apple orange lemon tea "
    "coffee water milk cheese market shop bank school library museum theatre park "
    "computer program server memory cache token model layer network signal engine "
    "question answer problem idea plan reason method result number list page word "
    "morning evening night winter summer spring autumn year month week day hour"
)


_ADJECTIVES = _words(
    "small large old young quiet loud bright dark warm cold quick slow happy sad "
    "green blue red yellow white black golden silver careful clever gentle brave "
    "strange simple busy empty full heavy light early late long short new ancient "
    "modern local distant tiny huge patient curious honest tired hungry calm"
)


_VERBS_PAST = _words(
    "saw found built opened closed carried painted wrote read watched followed "
    "visited cleaned fixed moved chose brought kept left helped asked answered "
    "cooked planted counted measured remembered forgot explained described "
    "noticed reached crossed climbed"
)


_VERBS_PRESENT = _words(
    "sees finds builds opens closes carries paints writes reads watches follows "
    "visits cleans fixes moves chooses brings keeps leaves helps asks answers "
    "cooks plants counts measures remembers explains describes notices reaches"
)


_VERBS_BASE = _words(
    "see find build open close carry paint write read watch follow visit clean "
    "fix move choose bring keep leave help ask answer cook plant count explain"
)


_PREPOSITIONS = _words("near behind under above beside inside across along beyond through")


_ADVERBS = _words("slowly quickly quietly carefully gladly rarely often always never soon")


_NAMES = _words(
    "Alice Bob Carol David Emma Frank Grace Henry Irene Jack Laura Martin Nina "
    "Oscar Paula Quentin Rosa Samuel Tara Victor Wendy"
)


_CONNECTIVES = ("and then", "but", "because", "while", "so", "after that", "although")


_QUESTIONS = (
    "What is the capital of {place}?",
    "How many {noun}s are in the {place2}?",
    "Why did the {noun} {verb} the {noun2}?",
    "Can you explain how a {noun} works?",
    "Where is the {adj} {noun}?",
    "Who {verbp} the {noun} every {time}?",
    "Please write a short story about a {adj} {noun}.",
    "Summarize the text in one sentence.",
    "Translate the word {noun} into French.",
)


_PLACES = _words("France Spain Italy Japan Brazil Canada Egypt Norway Kenya Peru")


_FIXED_LINES = (
    "Hello world! Hello there, how are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was a small village near a river.",
    "Thank you very much. You are welcome.",
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    print(i * i)",
    '{"name": "tiny", "layers": 2, "heads": 4}',
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2024, 3.14, 42%",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "Yes. No. Maybe. Okay! Sure? (maybe) [list] {set} <tag> #hash @user $5 & more...",
)


def _sentence(rng: random.Random) -> str:
    """One original English sentence from a small grammar."""
    noun, noun2 = rng.choice(_NOUNS), rng.choice(_NOUNS)
    adj, adj2 = rng.choice(_ADJECTIVES), rng.choice(_ADJECTIVES)
    kind = rng.randrange(6)
    if kind == 0:
        text = (
            f"The {adj} {noun} {rng.choice(_VERBS_PAST)} the {adj2} {noun2} "
            f"{rng.choice(_PREPOSITIONS)} the {rng.choice(_NOUNS)}."
        )
    elif kind == 1:
        text = (
            f"{rng.choice(_NAMES)} {rng.choice(_ADVERBS)} {rng.choice(_VERBS_PAST)} "
            f"a {adj} {noun} {rng.choice(_CONNECTIVES)} {rng.choice(_NAMES)} "
            f"{rng.choice(_VERBS_PAST)} it."
        )
    elif kind == 2:
        text = (
            f"Every {rng.choice(('morning', 'evening', 'week', 'day', 'winter'))}, "
            f"the {noun} {rng.choice(_VERBS_PRESENT)} {rng.randint(2, 99)} {noun2}s."
        )
    elif kind == 3:
        text = rng.choice(_QUESTIONS).format(
            place=rng.choice(_PLACES),
            place2=rng.choice(_NOUNS),
            noun=noun,
            noun2=noun2,
            adj=adj,
            verb=rng.choice(_VERBS_BASE),
            verbp=rng.choice(_VERBS_PRESENT),
            time=rng.choice(("day", "week", "year")),
        )
    elif kind == 4:
        text = (
            f"It was a {adj} {rng.choice(('day', 'night', 'year'))} in the {noun2}, "
            f"and the {noun} was {adj2}."
        )
    else:
        text = (
            f'"{rng.choice(("Look", "Listen", "Wait", "Come here"))}!" said '
            f"{rng.choice(_NAMES)}, {rng.choice(_ADVERBS)}."
        )
    return text


def corpus_lines(n_lines: int = CORPUS_LINES, seed: int = CORPUS_SEED) -> list[str]:
    """The deterministic training corpus for the tokenizer (plain English)."""
    rng = random.Random(seed)
    lines = list(_FIXED_LINES)
    while len(lines) < n_lines:
        lines.append(" ".join(_sentence(rng) for _ in range(rng.randint(1, 4))))
    return lines
