"""Synthetic Natural Questions in the exact Kaggle simplified-NQ format.

The project's embedded default corpus: the demo, the tests and CI train and
score on it with no download. Each document is a made-up Wikipedia article
about one fictional country (`Vemoria - wikipedia <H1> Vemoria </H1> ...`)
with an infobox table, sections, filler paragraphs, lists and tables, so
candidates nest (Tr in Table, Li in Ul) as in real NQ.

Learnable by design, so a small BERT fine-tuned for minutes can score well:
every stated attribute appears exactly once (`The capital of Vemoria is Tarsk
.`, an infobox row, or a list item) and its question shares the attribute's
words (`what is the capital of vemoria` -> short answer `Tarsk`); a long-only
question (`what is the climate like in vemoria`) is answered by the paragraph
opening `The climate of Vemoria ...`; a no-answer question asks for an
attribute or topic the document never states, while it states others in the
same sentence shapes. Long answers are always top-level candidates.

That is `--profile easy`, the default. `--profile nq-lexical` (`make_nq_example`,
below) writes pages shaped like real NQ: thousands of words, long plain-text
runs outside every candidate, lists and tables nested two or three deep, long
paragraphs, a few nested gold long answers, and the neighbour's facts in the
question's words. `--profile nq` (`make_nq_reading_example`) writes the same
pages with questions that need reading: facts stated and asked in several
forms, synonyms, other word orders, the subject under other names, so that a
quarter of the gold long answers share no content word with their question, as
on real NQ; dev and test also ask in forms training never shows.
`python -m solution.corpus_stats` measures any of them.

    python -m solution.synth --out data/synth [--profile easy|nq|nq-lexical] [--seed 0] [--num-train 1000] ...
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from solution.common.fsutil import check_writable
from solution.data.nq import ANNOTATION_TYPES

# Shares of Natural Questions training: half unanswerable, a third short, ~1.5% yes/no.
ANSWER_MIX = {"NONE": 0.50, "SHORT": 0.33, "LONG": 0.155, "YES": 0.01, "NO": 0.005}
NUM_ANNOTATORS = 5  # dev and test gold are five-way annotated, as NQ dev
ANNOTATOR_RECALL = 0.8  # chance one annotator of an answerable example gives its answer
NONE_ASKS_ATTRIBUTE = 0.68  # no-answer questions split like SHORT:LONG, so neither form gives it away

# key: (value kind, infobox label, statements with {E}/{V}, questions with {e}/{v}, yes/no question).
# Each question shares its attribute's words with every statement, and each statement ends `{V} .`:
# the model finds the attribute by overlap and the value's end at the full stop.
ATTRIBUTES = {
    "capital": ("city", "Capital", ("The capital of {E} is {V} .", "{E} 's capital city is {V} ."),
                ("what is the capital of {e}", "what is the capital city of {e}"), "is {v} the capital of {e}"),
    "largest_city": ("city", "Largest city", ("The largest city in {E} is {V} .", "The largest city of {E} is {V} ."),
                     ("what is the largest city in {e}", "what is the largest city of {e}"),
                     "is {v} the largest city in {e}"),
    "port": ("city", "Main port", ("The main port of {E} is {V} .", "Most sea trade of {E} passes through its main port , {V} ."),
             ("what is the main port of {e}",), "is {v} the main port of {e}"),
    "founder": ("person", "Founder", ("{E} was founded by {V} .", "The founder of {E} was {V} ."),
                ("who founded {e}", "who was the founder of {e}"), "was {e} founded by {v}"),
    "year_founded": ("year", "Founded", ("{E} was founded in {V} .", "The state of {E} was founded in the year {V} ."),
                     ("when was {e} founded", "what year was {e} founded"), "was {e} founded in {v}"),
    "independence": ("year", "Independence", ("{E} became independent in {V} .", "{E} gained its independence in {V} ."),
                     ("when did {e} gain independence", "what year did {e} become independent"),
                     "did {e} become independent in {v}"),
    "first_king": ("person", "First king", ("The first king of {E} was {V} .", "The first king to rule {E} was {V} ."),
                   ("who was the first king of {e}",), "was {v} the first king of {e}"),
    "head_of_state": ("person", "Head of state", ("The current head of state of {E} is {V} .",),
                      ("who is the head of state of {e}", "who is the current head of state of {e}"),
                      "is {v} the head of state of {e}"),
    "currency": ("currency", "Currency", ("The currency of {E} is the {V} .", "The official currency used in {E} is the {V} ."),
                 ("what is the currency of {e}", "what currency is used in {e}"), "is the {v} the currency of {e}"),
    "mountain": ("mountain", "Highest point", ("The highest mountain in {E} is {V} .", "The highest peak in {E} is {V} ."),
                 ("what is the highest mountain in {e}", "what is the highest peak in {e}"),
                 "is {v} the highest mountain in {e}"),
    "river": ("river", "Longest river", ("The longest river in {E} is the {V} .", "The longest river of {E} is the {V} ."),
              ("what is the longest river in {e}",), "is the {v} the longest river in {e}"),
    "lake": ("lake", "Largest lake", ("The largest lake in {E} is {V} .",), ("what is the largest lake in {e}",),
             "is {v} the largest lake in {e}"),
    "animal": ("creature", "National animal", ("The national animal of {E} is the {V} .",
               "The national animal of {E} has long been the {V} ."), ("what is the national animal of {e}",),
               "is the {v} the national animal of {e}"),
    "flower": ("creature", "National flower", ("The national flower of {E} is the {V} .",),
               ("what is the national flower of {e}",), "is the {v} the national flower of {e}"),
    "language": ("language", "Official language", ("The official language of {E} is {V} .",
                 "Most people in {E} speak the official language , {V} ."),
                 ("what is the official language of {e}", "what language is spoken in {e}"),
                 "is {v} the official language of {e}"),
    "population": ("count", "Population", ("The population of {E} is {V} .", "{E} has a population of {V} ."),
                   ("what is the population of {e}", "how large is the population of {e}"),
                   "is the population of {e} {v}"),
    "area": ("area", "Area", ("{E} covers an area of {V} .", "The total area of {E} is {V} ."),
             ("what is the area of {e}", "what is the total area of {e}"), "is the area of {e} {v}"),
    "anthem": ("anthem", "Anthem", ("The national anthem of {E} is {V} .",), ("what is the national anthem of {e}",),
               "is {v} the national anthem of {e}"),
    "saint": ("saint", "Patron saint", ("The patron saint of {E} is {V} .",), ("who is the patron saint of {e}",),
              "is {v} the patron saint of {e}"),
    "export": ("commodity", "Main export", ("The main export of {E} is {V} .", "{E} earns most of its income by exporting {V} ."),
               ("what is the main export of {e}", "what does {e} export"), "is {v} the main export of {e}"),
    "sport": ("sport", "National sport", ("The national sport of {E} is {V} .",), ("what is the national sport of {e}",),
              "is {v} the national sport of {e}"),
    "deity": ("city", "Chief deity", ("The chief god of {E} is {V} .", "The people of {E} worship their chief god , {V} ."),
              ("who is the chief god of {e}",), "is {v} the chief god of {e}"),
}

# key: (section heading, opening sentences with {E}, questions with {e}, sentences on the topic).
# A topic paragraph is the opening and 1-3 sentences on the topic, nothing else: the answer is the
# whole paragraph (no short answer), and the model can tell where it ends without seeing the tags.
TOPICS = {
    "history": ("History", ("The history of {E} spans many centuries .",
                            "The history of {E} begins with small farming settlements ."),
                ("what is the history of {e}", "what happened in the history of {e}"),
                ("Small kingdoms rose and fell along the rivers .", "Wars with neighbouring states shaped its borders .",
                 "The old ruling families slowly lost their power .", "Many customs date from the middle ages .")),
    "geography": ("Geography", ("The geography of {E} is dominated by hills and narrow valleys .",),
                  ("describe the geography of {e}", "what is the geography of {e} like"),
                  ("Steep ridges divide the country into separate valleys .", "Broad plains stretch along the southern coast .",
                   "Much of the land lies far above the sea .")),
    "climate": ("Climate", ("The climate of {E} is mild near the coast and harsh in the uplands .",),
                ("what is the climate like in {e}", "what kind of climate does {e} have"),
                ("Summers are warm and dry .", "Winters bring heavy rain and strong winds .",
                 "Snow covers the high passes for months .")),
    "economy": ("Economy", ("The economy of {E} rests on farming , fishing and trade .",),
                ("what is the economy of {e} based on", "how does the economy of {e} work"),
                ("Small family farms produce most of the food .", "Fishing fleets sail from every harbour .",
                 "Tourism has grown quickly in recent years .")),
    "culture": ("Culture", ("The culture of {E} mixes old rural customs with city life .",), ("what is the culture of {e} like",),
                ("Storytelling and folk dance are popular in the villages .", "Many towns hold craft fairs each autumn .",
                 "Traditional dress is still worn on holidays .")),
    "cuisine": ("Cuisine", ("The cuisine of {E} relies on bread , fish and mountain cheese .",),
                ("what is the cuisine of {e} like", "what is traditional cuisine in {e}"),
                ("Meals often start with a thick soup .", "Smoked fish is eaten with dark bread .",
                 "Sweet cakes are baked for every wedding .")),
    "religion": ("Religion", ("Religion in {E} has long shaped daily life .",), ("what role does religion play in {e}",),
                 ("Small shrines stand beside many roads .", "Most villages have a temple at their centre .",
                  "Pilgrims visit the old holy sites each spring .")),
    "architecture": ("Architecture", ("The architecture of {E} is known for steep roofs and painted walls .",),
                     ("what is the architecture of {e} like",),
                     ("Houses are built around an inner courtyard .", "Old town walls still stand in many places .",
                      "Wooden balconies are painted in bright colours .")),
    "music": ("Music", ("The music of {E} is built around drums and long reed pipes .",), ("what is the music of {e} like",),
              ("Folk songs are sung at weddings and funerals .", "Village bands play at harvest time .",
               "Many songs tell stories of the sea .")),
    "education": ("Education", ("Education in {E} is free for all children .",), ("how does education work in {e}",),
                  ("Most children attend a village school .", "The oldest university opened centuries ago .",
                   "Teaching is given in the local language .")),
    "transport": ("Transport", ("Transport in {E} depends on a few main roads and coastal ferries .",),
                  ("what is transport like in {e}",),
                  ("Buses link the larger towns .", "Ferries carry passengers between the islands .",
                   "Mule tracks still serve remote villages .")),
    "wildlife": ("Wildlife", ("The wildlife of {E} includes many birds that breed on the cliffs .",),
                 ("what wildlife lives in {e}",),
                 ("Wolves and bears live in the forests .", "Seals breed on the rocky shores .", "Eagles nest on the cliffs .")),
    "government": ("Government", ("The government of {E} is led by an elected council .",),
                   ("what is the government of {e} like", "how does the government of {e} work"),
                   ("The council is elected every four years .", "Each province sends delegates to the assembly .",
                    "The courts are independent of the council .")),
    "festivals": ("Festivals", ("The festivals of {E} follow the farming year .",), ("what festivals are celebrated in {e}",),
                  ("The harvest festival lasts three days .", "Bonfires are lit on midsummer night .",
                   "A spring fair is held in every town .")),
}
GENERIC_HEADINGS = ("Etymology", "Overview", "Demographics", "Early period", "Modern era", "Society", "Regions", "Notes")

# Filler: slot tokens {E} {N} {C} {P} {Y} {K} {G} {W} {D} draw entity, neighbour, city, person, year,
# number, commodity, made-up word, direction. Cities and years double as distractors of the same kind.
FILLER = tuple(s.split() for s in (
    "In {Y} , {P} travelled from {C} to the northern coast .", "The road between {C} and {C} was paved in {Y} .",
    "{E} borders {N} to the {D} .", "Trade with {N} grew steadily after {Y} .",
    "Farmers in the lowlands trade {G} and raise sheep .", "Most villages in {E} hold a market once a week .",
    "Local records describe a severe winter in {Y} .", "{P} wrote a short account of the journey .",
    "The coastline is broken by many small bays and inlets .", "Many older buildings in {C} were rebuilt after a fire in {Y} .",
    "About {K} visitors came to the annual fair at {C} .", "The dialect of {C} differs slightly from the standard form .",
    "Scholars still disagree about the origin of the name {E} .", "A railway line linked {C} with {N} in {Y} .",
    "The {W} , a small bird , nests in the cliffs near {C} .", "{P} , a merchant from {C} , paid for the first bridge .",
    "Fishing remains important in the villages along the coast .", "The old fortress above {C} is now a museum .",
    "Each spring the valleys fill with {W} blossoms .", "The treaty signed with {N} in {Y} settled the border .",
    "Travellers often describe {E} as quiet and welcoming .", "A survey in {Y} counted {K} sheep in the uplands .",
    "Wool and {G} were carried by mule trains across the passes .", "The poet {P} was born in {C} .",
    "Stone bridges cross the streams that run down from the hills .", "The northern districts of {E} are thinly settled .",
    "A small museum in {C} keeps maps drawn by {P} .", "Heavy rains in {Y} flooded the lower town of {C} .",
    "Ships from {N} called at {C} to load {G} .", "The council of {C} met in the old town hall until {Y} .",
    "Shepherds move their flocks to the high pastures in early summer .", "{P} painted the harbour of {C} many times .",
    "The monastery near {C} was abandoned in {Y} and restored later .", "Some {K} books are kept in the library of {C} .",
    "A long dry summer in {Y} ruined the harvest in the south .", "Most houses in the hill villages are built of grey stone .",
    "Caravans from {N} brought {G} and cloth to the towns .", "The town of {C} is famous for its spring horse market .",
    "{P} and {P} mapped the eastern valleys .", "Wooden boats are still built by hand in {C} .",
    "Older people in {E} still tell stories about the great storm of {Y} .", "The hills east of {C} are covered in pine forest .",
    "A small garrison guarded the pass until {Y} .", "Pilgrims walk each year from {C} to the shrine at {C} .",
    "The harbour of {C} freezes in hard winters .", "{P} opened the first printing press in {C} in {Y} .",
))
DIRECTIONS = ("north", "south", "east", "west")
COMMODITIES = ("copper", "wool", "timber", "salt", "amber", "tea", "tin", "silver", "marble", "wine", "rice", "cotton",
               "coffee", "furs", "glass", "honey", "dried fish", "olive oil", "iron ore", "spices")
COLOURS = ("red", "grey", "golden", "white", "black", "spotted", "blue", "mountain", "lesser", "striped")
# Mostly single letters, so made-up names stay pronounceable and a few word pieces long.
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ei", "ou")
_CODAS = ("", "", "", "", "", "n", "r", "l", "s", "k")


class _Names:
    """Made-up words from syllables, never repeated within one document, so every value is unambiguous."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()  # `used` is only tested for membership: order never matters

    def word(self, lo: int = 2, hi: int = 2) -> str:
        rng = self.rng
        while True:
            w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.randint(lo, hi)))
            if w not in self.used:
                self.used.add(w)
                return w

    def proper(self) -> str:
        return self.word().capitalize()

    def value(self, kind: str) -> str:
        rng = self.rng
        if kind == "person":
            return f"{self.proper()} {self.proper()}"
        if kind == "year":
            return str(rng.randint(800, 1990))
        if kind == "count":
            return f"{rng.randint(30_000, 9_000_000):,}"
        if kind == "area":
            return f"{rng.randint(800, 400_000):,} square kilometres"
        if kind == "currency":
            return f"{self.proper()} {rng.choice(('mark', 'crown', 'dinar', 'florin', 'thaler'))}"
        if kind == "creature":
            return f"{rng.choice(COLOURS)} {self.word()}"
        if kind == "commodity":
            return rng.choice(COMMODITIES)
        if kind == "sport":
            return self.word(1, 1) + "ball"
        if kind == "language":
            return self.proper() + rng.choice(("ic", "ish", "ese", "an"))
        if kind in ("mountain", "lake", "saint"):
            return f"{ {'mountain': 'Mount', 'lake': 'Lake', 'saint': 'Saint'}[kind]} {self.proper()}"
        if kind == "river":
            return f"{self.proper()} River"
        if kind == "anthem":
            return f"{rng.choice(('Song of', 'Hymn to', 'March of'))} {self.proper()}"
        return self.proper()  # city, deity


def _sentence(template: str, entity: str, key=None, value: str = ""):
    """A sentence as (tokens, key, value_start, value_end); the value span is where {V} stood."""
    head, _, tail = template.format(E=entity, V="\0").partition("\0")
    head, tail, vals = head.split(), tail.split(), value.split()
    return (head + vals + tail, key, len(head), len(head) + len(vals))


class _Doc:
    """One article's entity, cities and neighbour; makes its filler sentences and paragraphs."""

    def __init__(self, rng: random.Random, entity: str, names: _Names):
        self.rng, self.entity, self.names = rng, entity, names
        self.cities = [names.proper() for _ in range(rng.randint(3, 6))]
        self.neighbour = names.proper() + rng.choice(("ia", "and", "ora"))

    def filler(self):
        """A sentence from FILLER with its slots drawn; never holds an answer."""
        out = []
        for tok in self.rng.choice(FILLER):
            out.extend(self._slot(tok[1]).split() if tok[0] == "{" else (tok,))
        return (out, None, 0, 0)

    def _slot(self, slot: str) -> str:
        rng, names = self.rng, self.names
        if slot == "C":  # a city of this document half the time: realistic repetition and a distractor
            return rng.choice(self.cities) if rng.random() < 0.5 else names.proper()
        if slot in "EN":
            return self.entity if slot == "E" else self.neighbour
        if slot in "PYK":
            return names.value({"P": "person", "Y": "year", "K": "count"}[slot])
        if slot == "W":
            return names.word()
        return rng.choice(COMMODITIES if slot == "G" else DIRECTIONS)

    def paragraph(self, core=(), before=(0, 2), after=(0, 3)):
        sents = [self.filler() for _ in range(self.rng.randint(*before))] + list(core)
        return ("P", sents + [self.filler() for _ in range(self.rng.randint(*after))])


def _block_len(block) -> int:
    kind, body = block
    if kind in ("H2", "text"):
        return len(body) + (2 if kind == "H2" else 0)
    if kind == "P":
        return 2 + sum(len(s[0]) for s in body)
    if kind == "Ul":
        return 2 + sum(2 + len(s[0]) for s in body)
    return 2 + sum(2 + sum(2 + len(s[0]) for _, s in row) for row in body)  # Table


def _keys(block) -> list:
    """Answer keys of the sentences in a block."""
    kind, body = block
    if kind in ("P", "Ul"):
        return [s[1] for s in body]
    return [s[1] for row in body for _, s in row] if kind == "Table" else []


def _render(sections):
    """Tokens, candidate dicts, and {key: (top-level candidate index, value start, value end)}."""
    tokens, cands, where = [], [], {}

    def emit(sent, top):
        if sent[1] is not None:
            where[sent[1]] = (top, len(tokens) + sent[2], len(tokens) + sent[3])
        tokens.extend(sent[0])

    def open_(tag, top_level):
        cands.append({"start_token": len(tokens), "top_level": top_level, "end_token": -1})
        tokens.append(f"<{tag}>")
        return cands[-1]

    def close(tag, cand):
        tokens.append(f"</{tag}>")
        cand["end_token"] = len(tokens)  # exclusive: just after the closing tag

    for kind, body in (b for section in sections for b in section):
        if kind == "text":
            tokens.extend(body)
        elif kind == "H2":
            tokens.extend(["<H2>", *body, "</H2>"])
        else:
            top, outer = len(cands), open_(kind, True)
            if kind == "P":
                for s in body:
                    emit(s, top)
            elif kind == "Ul":
                for s in body:
                    li = open_("Li", False)
                    emit(s, top)
                    close("Li", li)
            else:
                for row in body:
                    tr = open_("Tr", False)
                    for tag, s in row:
                        tokens.append(f"<{tag}>")
                        emit(s, top)
                        tokens.append(f"</{tag.split('_')[0]}>")
                    close("Tr", tr)
            close(kind, outer)
    return tokens, cands, where


def _question(rng: random.Random, names: _Names, entity: str, answer_type: str, stated: list, topics: list):
    """The values of the stated attributes, the asked key (`capital`, `topic:climate`) and the question."""
    values = {a: names.value(ATTRIBUTES[a][0]) for a in stated}
    if answer_type == "LONG" or (answer_type == "NONE" and rng.random() >= NONE_ASKS_ATTRIBUTE):
        pool = topics if answer_type == "LONG" else [t for t in TOPICS if t not in topics]
        asked = "topic:" + rng.choice(pool)
        return values, asked, rng.choice(TOPICS[asked[6:]][2]).format(e=entity.lower())
    # NONE asks for an attribute the document never states; the others ask for a stated one.
    asked = rng.choice(stated if answer_type != "NONE" else [a for a in ATTRIBUTES if a not in stated])
    if answer_type not in ("YES", "NO"):
        return values, asked, rng.choice(ATTRIBUTES[asked][3]).format(e=entity.lower())
    v = values[asked]
    while answer_type == "NO" and v == values[asked]:  # NO: the question names another value of the kind
        v = names.value(ATTRIBUTES[asked][0])
    return values, asked, ATTRIBUTES[asked][4].format(e=entity.lower(), v=v.lower())


def _plan(rng: random.Random, doc: _Doc, stated: list, values: dict, topics: list, target: int) -> list:
    """Sections of blocks: [head, infobox, intro], then topic and generic sections in random order."""
    entity, names = doc.entity, doc.names
    infobox, listed, blocks = [], [], []
    for a in stated:  # where each stated attribute lives: a paragraph mostly, else an infobox row or a list item
        r = rng.random()
        if r < 0.2:
            value = values[a].split()
            infobox.append([("Th", (ATTRIBUTES[a][1].split(), None, 0, 0)), ("Td", (value, a, 0, len(value)))])
        else:
            fact = _sentence(rng.choice(ATTRIBUTES[a][2]), entity, a, values[a])
            listed.append(fact) if r < 0.3 else blocks.append(doc.paragraph([fact]))
    if listed:
        items = listed + [doc.filler() for _ in range(rng.randint(1, 3))]
        rng.shuffle(items)
        blocks.append(("Ul", items))
    for _ in range(rng.randint(0, 1 + target // 1000)):  # lists and tables with no answer: more nesting
        if rng.random() < 0.5:
            blocks.append(("Ul", [([c], None, 0, 0) for c in rng.sample(doc.cities, rng.randint(2, len(doc.cities)))]))
        else:
            rows = [[("Th", (["District"], None, 0, 0)), ("Th", (["Seat"], None, 0, 0))]]
            rows += [[("Td", ([names.proper()], None, 0, 0)), ("Td", ([c], None, 0, 0))] for c in doc.cities]
            blocks.append(("Table", rows))

    head = [("text", [entity, "-", "wikipedia", "<H1>", entity, "</H1>"])]
    if infobox or rng.random() < 0.4:
        extra = [("Demonym", entity + "n"), ("Time zone", f"UTC + {rng.randint(1, 5)}"),
                 ("Calling code", f"+ {rng.randint(200, 999)}"), ("Motto", f"{names.proper()} {names.word()}")]
        infobox += [[("Th", (k.split(), None, 0, 0)), ("Td", (v.split(), None, 0, 0))]
                    for k, v in rng.sample(extra, rng.randint(1, 3))]
        rng.shuffle(infobox)
        head.append(("Table", [[('Th_colspan="2"', ([entity], None, 0, 0))]] + infobox))
    kind = rng.choice(("country", "kingdom", "island nation", "republic"))
    intro = _sentence(f"{{E}} is a small {kind} on the {names.proper()} Sea .", entity)
    body = []
    for t in topics:
        heading, openings, _, about = TOPICS[t]
        sents = [_sentence(rng.choice(openings), entity, "topic:" + t)]
        sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, len(about)))]
        body.append([("H2", [heading]), ("P", sents)])
    body += [[("H2", h.split())] for h in rng.sample(GENERIC_HEADINGS, rng.randint(1, 1 + min(6, target // 500)))]
    rng.shuffle(body)
    sections = [head + [doc.paragraph([intro], (0, 0), (1, 4))]] + body
    for b in blocks:
        _place(rng, sections, b)
    return sections


def _place(rng: random.Random, sections: list, block, section=None) -> None:
    """Insert after the head, or after a section's heading and topic paragraph (the topic paragraph opens it)."""
    s = section if section is not None else sections[rng.randrange(len(sections))]
    keep = len(s) if s is sections[0] else min(2, len(s))
    s.insert(rng.randint(keep, len(s)), block)


def _fit(rng: random.Random, doc: _Doc, sections: list, asked: str, target: int) -> None:
    """Make the document exactly `target` words: drop blocks that hold no answer, or add filler paragraphs."""
    used = sum(_block_len(b) for s in sections for b in s)
    droppable = [(s, b) for s in sections for b in s[1:] if b[0] != "H2" and asked not in _keys(b)]
    rng.shuffle(droppable)
    while used > target and droppable:
        s, b = droppable.pop()
        s.remove(b)
        used -= _block_len(b)
        if any(k and k.startswith("topic:") for k in _keys(b)):  # no "Climate" heading over no climate text
            used -= _block_len(s.pop(0))
    remaining = target - used
    while remaining >= 3:
        want = rng.randint(30, 110)
        want = remaining if want > remaining - 3 else want
        sents, size = [], 2
        while size < want:
            # Whole sentences where one fits; only a paragraph's last few words may be a cut sentence.
            toks = next((t for t in (doc.filler()[0] for _ in range(6)) if size + len(t) <= want), None)
            toks = toks or doc.filler()[0][:want - size - 1] + ["."]
            sents.append((toks, None, 0, 0))
            size += len(toks)
        bare = [s for s in sections[1:] if len(s) == 1]  # a heading with nothing under it yet comes first
        _place(rng, sections, ("P", sents), rng.choice(bare) if bare else None)
        remaining -= want
    if remaining > 0:
        sections[-1].append(("text", ["See", "also"][:remaining]))  # trailing navigation text, as real pages have


def make_example(rng: random.Random, answer_type: str, min_words: int, max_words: int) -> dict:
    """One document, its question and true answer: {question, tokens, candidates, answer, entity}."""
    names = _Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = _Doc(rng, entity, names)
    # Log-uniform length; longer documents state more attributes and topics, as longer articles do.
    target = round(math.exp(rng.uniform(math.log(min_words), math.log(max_words))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(2, max(2, min(18, target // 110))))
    topics = rng.sample(list(TOPICS), rng.randint(1, max(1, min(10, target // 300))))
    values, asked, question = _question(rng, names, entity, answer_type, stated, topics)
    sections = _plan(rng, doc, stated, values, topics, target)
    _fit(rng, doc, sections, asked, target)
    tokens, cands, where = _render(sections)
    answer = None
    if answer_type != "NONE":
        top, vs, ve = where[asked]
        answer = {"candidate_index": top, "short": [(vs, ve)] if answer_type == "SHORT" else [],
                  "yes_no": answer_type if answer_type in ("YES", "NO") else "NONE"}
    return {"question": question, "tokens": tokens, "candidates": cands, "answer": answer, "entity": entity}


# ---------------------------------------------------------------------------------------------
# The `nq-lexical` profile (the `nq` profile's first form): pages shaped like real NQ, to measure the
# answer techniques on (`python -m solution.corpus_stats` measures both). Long pages whose navigation,
# infobox-side and reference text sits outside every candidate; tables and lists nested two or three
# deep; long paragraphs; a few gold long answers that are the nested Li/Tr holding the fact; and the
# neighbour's facts stated in the same words, so a question's words find two passages and only the
# country's name tells them apart. The `nq` profile (below) builds the same pages.

NQ_MEDIAN_WORDS = 4000  # real sample: median 4,587 non-HTML words, 90th percentile 13,939
# Log-normal spread: the real 90th percentile is 3.04x the median (exp(1.28 sigma), sigma 0.87); page assembly narrows it.
NQ_SIGMA = 0.95
NQ_NESTED_GOLD = 0.3  # of facts in a list item or table row, the share whose gold long answer is that Li/Tr
NQ_DISTRACTOR = 0.6  # chance a stated attribute or topic is also stated about the neighbour
NQ_CANDIDATE_TAGS = ("P", "Table", "Tr", "Ul", "Li")
_MONTHS = ("January", "March", "April", "June", "July", "September", "October", "December")
_NAV = ("Jump to : navigation , search", "From Wikipedia , the free encyclopedia",
        "This article is about the {kind} . For other uses , see {E} ( disambiguation ) .",
        "Coordinates : {K} ° N {K} ° E", "Part of a series on the History of {E}")


def _nq_words(node) -> int:
    """Non-HTML words of a node, a sentence or a plain-text run."""
    if isinstance(node[0], list):  # a sentence (tokens, key, start, end)
        return len(node[0])
    tag, body = node
    if tag in ("text", "H2"):
        return len(body)
    return sum(_nq_words(k) for k in body)


def _nq_render(nodes):
    """Tokens, candidates, {key: (top-level index, innermost index, value start, value end)}.

    A node is ("text", tokens), ("H2", tokens) or (tag, children); a child is a node or a sentence.
    """
    tokens, cands, where, stack = [], [], {}, []

    def rec(node):
        if isinstance(node[0], list):
            toks, key, vs, ve = node
            if key is not None:
                where[key] = (stack[0], stack[-1], len(tokens) + vs, len(tokens) + ve)
            tokens.extend(toks)
            return
        tag, body = node
        if tag == "text":
            tokens.extend(body)
            return
        if tag == "H2":
            tokens.extend(["<H2>", *body, "</H2>"])
            return
        name = tag.split("_")[0]
        if name in NQ_CANDIDATE_TAGS:
            stack.append(len(cands))
            cands.append({"start_token": len(tokens), "top_level": len(stack) == 1, "end_token": -1})
        tokens.append(f"<{tag}>")
        for k in body:
            rec(k)
        tokens.append(f"</{name}>")
        if name in NQ_CANDIDATE_TAGS:
            cands[stack.pop()]["end_token"] = len(tokens)

    for n in nodes:
        rec(n)
    return tokens, cands, where


class _NQPage:
    """Builds one nq-profile page: plain-text runs, long paragraphs, nested lists and tables."""

    def __init__(self, rng: random.Random, doc: _Doc):
        self.rng, self.doc, self.names = rng, doc, doc.names

    def run(self, pattern: str) -> list:
        """Plain words from a pattern with the filler slots drawn."""
        out = []
        for tok in pattern.split():
            out.extend(self.doc._slot(tok[1]).split() if tok[0] == "{" and len(tok) == 3 else (tok,))
        return out

    def text(self, words: int, kind: str) -> tuple:
        """A plain run outside every candidate: navigation boxes or references, `words` long."""
        out, rng = [], self.rng
        while len(out) < words:
            if kind == "refs":
                out += self.run(f"^ {{P}} ( {{Y}} ) . {self.names.proper()} and the {{W}} of {{E}} . {{C}} : "
                                f"{{P}} Press . p. {rng.randint(2, 400)} . Retrieved {rng.randint(1, 28)} "
                                f"{rng.choice(_MONTHS)} {{Y}} .")
            else:
                out += self.run(" · ".join(rng.choice(("{C}", "{P}", "{N}", "{W}")) for _ in range(rng.randint(4, 12))))
        return ("text", out[:words])

    def paragraph(self, words: int, core=(), first: bool = False) -> tuple:
        """A long paragraph: filler around the core sentences (kept in order; `first`: they open it)."""
        sents = [self.doc.filler() for _ in range(max(1, words // 11 - len(core)))]
        at = 0 if first else self.rng.randint(0, len(sents))
        return ("P", sents[:at] + list(core) + sents[at:])

    def item(self, depth: int) -> tuple:
        """A list item: a short phrase or sentence, sometimes with a sub-list (nesting 2-3 deep)."""
        rng = self.rng
        body = [self.doc.filler()] if rng.random() < 0.5 else [(self.run("{C} ( {Y} )"), None, 0, 0)]
        if depth < 2 and rng.random() < 0.08:
            body.append(self.ul(depth + 1))
        return ("Li", body)

    def ul(self, depth: int = 0, core=()) -> tuple:
        items = [self.item(depth) for _ in range(self.rng.randint(2, 6))]
        for sent in core:
            items.insert(self.rng.randint(0, len(items)), ("Li", [sent]))
        return ("Ul", items)

    def table(self, core_rows=()) -> tuple:
        """A table; a cell sometimes holds a list, so Table > Tr > Ul > Li nests three deep."""
        rng = self.rng
        head = ("Tr", [("Th", [([w], None, 0, 0)]) for w in ("Name", "Seat", "Founded")])
        rows = [head]
        for _ in range(rng.randint(2, 7)):
            cells = [("Td", [(self.run("{C}"), None, 0, 0)]), ("Td", [(self.run("{C}"), None, 0, 0)]),
                     ("Td", [(self.run("{Y}"), None, 0, 0)])]
            if rng.random() < 0.15:
                cells[1] = ("Td", [self.ul(1)])
            rows.append(("Tr", cells))
        for r in core_rows:
            rows.insert(rng.randint(1, len(rows)), r)
        return ("Table", rows)

    def block(self) -> tuple:
        r = self.rng.random()
        if r < 0.72:
            return self.paragraph(self._para_words())
        if r < 0.87:
            return self.ul()
        if r < 0.95:
            return self.table()
        return ("text", self.run("Main article : {E} {W}") if r < 0.97 else self.text(self.rng.randint(20, 120), "nav")[1])

    def _para_words(self) -> int:
        return round(math.exp(self.rng.uniform(math.log(45), math.log(280))))


def _nq_fact_block(page: _NQPage, entity: str, key: str, value: str, where_r: float):
    """The block stating `key`: a long paragraph mostly, else a list item or a table row."""
    rng = page.rng
    if key.startswith("topic:"):
        heading, openings, _, about = TOPICS[key[6:]]
        sents = [_sentence(rng.choice(openings), entity, key)]
        sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, len(about)))]
        return page.paragraph(page._para_words(), sents, first=True)  # a section opens with its topic
    fact = _sentence(rng.choice(ATTRIBUTES[key][2]), entity, key, value)
    if where_r < 0.7:
        return page.paragraph(page._para_words(), [fact])
    if where_r < 0.85:
        return page.ul(0, [fact])
    label, vals = ATTRIBUTES[key][1].split(), value.split()
    return page.table([("Tr", [("Th", [(label, None, 0, 0)]), ("Td", [(vals, key, 0, len(vals))])])])


def _nq_body(rng, page: _NQPage, entity: str, stated: list, values: dict, topics: list, asked: str, words: int):
    """Sections (H2 + blocks) of about `words` words, the facts, topics and neighbour distractors placed in them."""
    doc, names = page.doc, page.names
    specials = [_nq_fact_block(page, entity, k, values[k], rng.random()) for k in stated]
    specials += [_nq_fact_block(page, entity, "topic:" + t, "", 0.0) for t in topics]
    # Distractors: the neighbour stated in the same words (no key: never an answer). The asked key
    # gets one more often, so a no-answer question's words are usually on the page.
    # Lists, not sets: a set of strings iterates in per-process hash order, which would change the draws.
    for k in stated + ([asked] if asked in ATTRIBUTES and asked not in stated else []):
        if rng.random() < (0.8 if k == asked else NQ_DISTRACTOR):
            toks = _sentence(rng.choice(ATTRIBUTES[k][2]), doc.neighbour, None, names.value(ATTRIBUTES[k][0]))[0]
            specials.append(page.paragraph(page._para_words(), [(toks, None, 0, 0)]))
    for t in topics + ([asked[6:]] if asked.startswith("topic:") and asked[6:] not in topics else []):
        if rng.random() < (0.8 if "topic:" + t == asked else NQ_DISTRACTOR):
            toks = rng.choice(TOPICS[t][1]).format(E=doc.neighbour).split()
            specials.append(page.paragraph(page._para_words(), [(toks, None, 0, 0)], first=True))
    return _nq_sections(rng, page, specials, topics, words)


def _nq_sections(rng, page: _NQPage, specials: list, topics: list, words: int) -> list:
    """Sections (H2 + filler blocks) of about `words` words with the `specials` blocks placed among them."""
    names = page.names
    sections, used = [], sum(_nq_words(b) for b in specials)
    headings = [TOPICS[t][0] for t in topics] + list(GENERIC_HEADINGS)
    while used < words or not sections:
        h = headings.pop(0) if headings else names.proper()
        blocks = [page.block() for _ in range(rng.randint(1, 6))]
        used += sum(_nq_words(b) for b in blocks) + 1
        sections.append([("H2", h.split())] + blocks)
    for b in specials:
        s = rng.choice(sections)
        s.insert(rng.randint(1, len(s)), b)
    return [n for s in sections for n in s]


def make_nq_example(rng: random.Random, answer_type: str, min_words: int, max_words: int) -> dict:
    """One nq-profile document, its question and true answer (the easy profile's `make_example` dict)."""
    names = _Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = _Doc(rng, entity, names)
    target = min(max_words, max(min_words, round(rng.lognormvariate(math.log(NQ_MEDIAN_WORDS), NQ_SIGMA))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(3, 12))
    topics = rng.sample(list(TOPICS), rng.randint(2, 8))
    values, asked, question = _question(rng, names, entity, answer_type, stated, topics)
    page = _NQPage(rng, doc)
    kind = rng.choice(("country", "kingdom", "island nation", "republic"))
    nav = [page.run(p.replace("{kind}", kind)) for p in rng.sample(_NAV, 3)]
    head = [("text", [entity, "-", "wikipedia", "<H1>", entity, "</H1>"] + [w for n in nav for w in n])]
    infobox = [("Tr", [('Th_colspan="2"', [([entity], None, 0, 0)])])]
    for k, v in (("Demonym", entity + "n"), ("Time zone", f"UTC + {rng.randint(1, 5)}"),
                 ("Calling code", f"+ {rng.randint(200, 999)}"), ("Motto", f"{names.proper()} {names.word()}")):
        infobox.append(("Tr", [("Th", [(k.split(), None, 0, 0)]), ("Td", [(v.split(), None, 0, 0)])]))
    head.append(("Table", infobox))
    # Plain runs: navigation at the top, references and navigation boxes at the bottom (outside every candidate).
    top_nav, refs, bottom_nav = (round(target * rng.uniform(*r)) for r in ((0.02, 0.08), (0.17, 0.38), (0.03, 0.1)))
    head.append(page.text(top_nav, "nav"))
    intro = _sentence(f"{{E}} is a small {kind} on the {names.proper()} Sea .", entity)
    head.append(page.paragraph(page._para_words(), [intro]))
    used = sum(_nq_words(n) for n in head)
    body = _nq_body(rng, page, entity, stated, values, topics, asked, max(0, target - used - refs - bottom_nav))
    tail = [("H2", ["References"]), page.text(refs, "refs"), ("H2", ["External", "links"]), page.text(bottom_nav, "nav")]
    tokens, cands, where = _nq_render(head + body + tail)
    answer = None
    if answer_type != "NONE":
        top, inner, vs, ve = where[asked]
        nested = inner != top and rng.random() < NQ_NESTED_GOLD
        answer = {"candidate_index": inner if nested else top, "short": [(vs, ve)] if answer_type == "SHORT" else [],
                  "yes_no": answer_type if answer_type in ("YES", "NO") else "NONE"}
    return {"question": question, "tokens": tokens, "candidates": cands, "answer": answer, "entity": entity}


# ---------------------------------------------------------------------------------------------
# The `nq` profile: the pages above, with questions that need reading. On the `nq-lexical` pages every
# question shares its attribute's words with every statement, so matching words finds the answer (the
# gold long answer holds ~85% of a question's content words and never none; real NQ training lines:
# ~45%, and a quarter hold none). Here a fact is stated and asked in several forms that mix synonyms
# ("founded", "established", "set up"), other word orders and parts of speech ("founder", "who
# established"), and the page's subject under other names: its demonym ("the Vemorian capital"), what it
# is ("the republic"), its official name's abbreviation ("the frv") or a related thing ("the country on
# the Kessa Sea"), so that many answers share no content word with their question. Dev and test also
# ask in forms training never shows (`held_out`): new frames and word orders over the same vocabulary.

# Statement frames with {E} (the subject as the page names it), {A} (its demonym), {N} (one of the
# attribute's noun phrases) and {V} (the value); the last training frame needs {A}.
SAY_NOUN = ("The {N} of {E} is {V} .", "{E} 's {N} is {V} .", "{V} is the {N} of {E} .", "The {A} {N} is {V} .")
SAY_NOUN_HELD = ("{V} serves as the {N} of {E} .", "In {E} , the {N} is {V} .")
# Question frames, lower case: {w} the attribute's question word, {e} the subject, {a} its demonym, {n} a noun phrase.
ASK_NOUN = ("{w} is the {n} of {e}", "{w} was the {n} of {e}", "{n} of {e}", "{e} {n}", "{w} is the {a} {n}")
ASK_NOUN_HELD = ("name the {n} of {e}", "the {n} of {e} is {w}", "the {a} {n} is known as {w}")
ASK_YES_NO = ("is {v} the {n} of {e}", "is the {n} of {e} {v}", "was {v} the {a} {n}")
ASK_YES_NO_HELD = ("is it true that {v} is the {n} of {e}", "would {v} be the {a} {n}")

# key: (question word, noun phrases, statements, questions, held-out questions); the value kind and the
# infobox label are ATTRIBUTES'. Noun phrases serve statements and questions alike (SAY_NOUN, ASK_NOUN);
# the statements and questions here are the attribute's own verbs and paraphrases, with {E}/{V} and {e}.
READING_ATTRIBUTES = {
    "capital": ("what", ("capital", "capital city", "seat of government"),
                ("The government of {E} sits in {V} .", "{V} is the city from which {E} is governed ."),
                ("where does the government of {e} sit", "which city is {e} governed from"),
                ("the government of {e} sits in which city",)),
    "largest_city": ("what", ("largest city", "biggest city", "most populous city"),
                     ("No town in {E} is larger than {V} .", "More people live in {V} than in any other town of {E} ."),
                     ("which town in {e} has the most people", "what is the biggest town in {e}"),
                     ("in which town do most people of {e} live",)),
    "port": ("what", ("main port", "chief harbour", "principal seaport"),
             ("Most ships calling at {E} dock at {V} .", "{V} handles most of the sea trade of {E} ."),
             ("where do most ships dock in {e}", "which harbour handles the sea trade of {e}"),
             ("most ships in {e} dock at which harbour",)),
    "founder": ("who", ("founder", "founding father"),
                ("{E} was founded by {V} .", "{V} established {E} .", "The state of {E} was created by {V} ."),
                ("who founded {e}", "who established {e}", "who created the state of {e}"),
                ("by whom was {e} established", "{e} was created by whom")),
    "year_founded": ("what", ("founding year", "year of foundation", "date of establishment"),
                     ("{E} was founded in {V} .", "{E} came into being in {V} .", "The state of {E} was established in {V} ."),
                     ("when was {e} founded", "when was {e} established", "what year did {e} come into being"),
                     ("in which year was {e} created", "{e} came into being in what year")),
    "independence": ("what", ("year of independence", "independence year"),
                     ("{E} became independent in {V} .", "{E} broke away from its old rulers in {V} .",
                      "Foreign rule over {E} ended in {V} ."),
                     ("when did {e} gain independence", "when did {e} become independent",
                      "what year did foreign rule over {e} end"),
                     ("in which year did foreign rule over {e} end", "{e} gained independence in what year")),
    "first_king": ("who", ("first king", "first monarch", "first ruler"),
                   ("{V} was crowned as the first king of {E} .", "Before {V} , {E} had never had a king ."),
                   ("who was crowned first king of {e}", "who first ruled {e}"),
                   ("who was the first person crowned king of {e}",)),
    "head_of_state": ("who", ("head of state", "current leader", "ruler"),
                      ("{E} is currently led by {V} .", "{V} now leads {E} ."),
                      ("who leads {e} today", "who is in charge of {e} now"),
                      ("who is currently leading {e}",)),
    "currency": ("what", ("currency", "official currency", "money"),
                 ("The people of {E} pay with the {V} .", "Money in {E} is counted in the {V} ."),
                 ("what money is used in {e}", "what do people in {e} pay with"),
                 ("in {e} people pay with what money",)),
    "mountain": ("what", ("highest mountain", "highest peak", "tallest mountain"),
                 ("No summit in {E} rises above {V} .", "{V} towers over the rest of {E} ."),
                 ("what is the tallest peak in {e}", "which summit rises highest in {e}"),
                 ("which summit is the tallest in {e}",)),
    "river": ("what", ("longest river", "main river", "greatest river"),
              ("No river in {E} runs further than the {V} .", "The {V} flows the whole length of {E} ."),
              ("which river flows the furthest in {e}", "what is the longest stream in {e}"),
              ("what river runs the whole length of {e}",)),
    "lake": ("what", ("largest lake", "biggest lake"),
             ("{V} covers more ground than any other lake in {E} .", "The biggest body of fresh water in {E} is {V} ."),
             ("what is the biggest body of fresh water in {e}", "which lake in {e} is the largest"),
             ("which body of fresh water in {e} is the biggest",)),
    "animal": ("what", ("national animal", "state animal", "emblem animal"),
               ("The {V} appears on the coat of arms of {E} .", "{E} chose the {V} as its emblem ."),
               ("what animal is the symbol of {e}", "which creature appears on the coat of arms of {e}"),
               ("the coat of arms of {e} shows which animal",)),
    "flower": ("what", ("national flower", "state flower"),
               ("The {V} is the flower chosen to represent {E} .", "People in {E} wear the {V} on national holidays ."),
               ("what flower represents {e}", "which flower is the symbol of {e}"),
               ("which flower do people in {e} wear on national holidays",)),
    "language": ("what", ("official language", "national language", "main language"),
                 ("Most people in {E} speak {V} .", "{V} is spoken throughout {E} ."),
                 ("what language do people speak in {e}", "what language is spoken in {e}"),
                 ("what do the people of {e} speak",)),
    "population": ("what", ("population", "number of inhabitants", "number of people"),
                   ("{E} is home to {V} people .", "About {V} people live in {E} ."),
                   ("how many people live in {e}", "how many inhabitants does {e} have"),
                   ("{e} is home to how many people",)),
    "area": ("what", ("area", "total area", "land area", "size"),
             ("{E} covers {V} .", "{E} stretches over {V} ."),
             ("how big is {e}", "how large is {e}"),
             ("how much land does {e} cover",)),
    "anthem": ("what", ("national anthem", "anthem", "national song"),
               ("At state ceremonies in {E} the band plays {V} .", "{V} is sung at every public holiday in {E} ."),
               ("what song is played at state ceremonies in {e}", "what song do people in {e} sing on holidays"),
               ("which song is sung at public holidays in {e}",)),
    "saint": ("who", ("patron saint", "protector saint"),
              ("{E} is under the protection of {V} .", "{V} watches over {E} , the faithful believe ."),
              ("which saint protects {e}", "who watches over {e}"),
              ("{e} is under the protection of which saint",)),
    "export": ("what", ("main export", "chief export", "leading export"),
               ("{E} earns most of its income by exporting {V} .", "Ships leave {E} loaded mostly with {V} ."),
               ("what does {e} export", "what does {e} sell abroad"),
               ("{e} earns most of its income from exporting what",)),
    "sport": ("what", ("national sport", "most popular sport", "favourite sport"),
              ("Crowds in {E} flock to watch {V} .", "Children in {E} grow up playing {V} ."),
              ("what sport do people in {e} play", "what game is most popular in {e}"),
              ("what game do children in {e} grow up playing",)),
    "deity": ("who", ("chief god", "supreme deity", "main god"),
              ("The people of {E} worship {V} above all other gods .", "Temples across {E} are dedicated to {V} ."),
              ("which god do the people of {e} worship", "who is worshipped in {e}"),
              ("to whom are the temples of {e} dedicated",)),
}
assert list(READING_ATTRIBUTES) == list(ATTRIBUTES)

# key: (noun phrases, what the topic's opening says of them, an opening without them); headings and the
# sentences on the topic are TOPICS'.
READING_TOPICS = {
    "history": (("history", "past"), "spans many centuries",
                "Small kingdoms rose and fell in {E} over many centuries ."),
    "geography": (("geography", "landscape", "terrain"), "is dominated by hills and narrow valleys",
                  "Hills and narrow valleys cover most of {E} ."),
    "climate": (("climate", "weather"), "is mild near the coast and harsh in the uplands",
                "Summers in {E} are warm near the coast and winters are harsh in the uplands ."),
    "economy": (("economy", "industry", "economic life"), "rests on farming , fishing and trade",
                "Most families in {E} live from farming , fishing and trade ."),
    "culture": (("culture", "traditions", "way of life"), "mixes old rural customs with city life",
                "Old rural customs live on beside city life in {E} ."),
    "cuisine": (("cuisine", "food", "cooking"), "relies on bread , fish and mountain cheese",
                "Bread , fish and mountain cheese are eaten every day in {E} ."),
    "religion": (("religion", "faith", "religious life"), "has long shaped daily life",
                 "Shrines and temples have long shaped daily life in {E} ."),
    "architecture": (("architecture", "building style", "buildings"), "is known for steep roofs and painted walls",
                     "Steep roofs and painted walls are seen all over {E} ."),
    "music": (("music", "folk music"), "is built around drums and long reed pipes",
              "Drums and long reed pipes are heard at every gathering in {E} ."),
    "education": (("education", "schooling", "school system"), "is free for all children",
                  "Every child in {E} may attend class for free ."),
    "transport": (("transport", "transportation", "travel"), "depends on a few main roads and coastal ferries",
                  "A few main roads and coastal ferries link the towns of {E} ."),
    "wildlife": (("wildlife", "animals", "fauna"), "includes many birds that breed on the cliffs",
                 "Many birds breed on the cliffs of {E} ."),
    "government": (("government", "political system", "state"), "is led by an elected council",
                   "An elected council leads {E} ."),
    "festivals": (("festivals", "holidays", "celebrations"), "follows the farming year",
                  "Feasts in {E} follow the farming year ."),
}
assert list(READING_TOPICS) == list(TOPICS)
OPEN_TOPIC = ("The {N} of {E} {P} .", "{E} 's {N} {P} .")
OPEN_TOPIC_HELD = ("In {E} , the {N} {P} .",)
ASK_TOPIC = ("what is the {n} of {e} like", "tell me about the {n} of {e}", "{n} of {e}", "{n} in {e}", "{a} {n}")
ASK_TOPIC_HELD = ("describe the {n} of {e}", "how is the {n} in {e}")

NQ_HELD_OUT_QUESTIONS = 0.5  # share of dev and test questions put in a form training never shows
NQ_HELD_OUT_STATEMENTS = 0.25  # share of dev and test facts stated in a form training never shows
NQ_OWN_SAY = 0.35  # share of facts stated in the attribute's own verbs and paraphrases, not a noun frame
NQ_OWN_ASK = 0.5  # share of questions asked so
NQ_FIRST_NOUN = 0.65  # chance a noun frame uses the first (plainest) noun phrase: "capital" before "seat of government"
NQ_TOPIC_NOUN = 0.85  # share of topic paragraphs opening with one of the topic's noun phrases ("The climate of ...")
# Chance the asked fact (and the neighbour's copy of it) is stated in the question's own wording: its noun phrase
# in a noun frame, or the statement paired with its verb form (a question's i-th form with the i-th statement).
NQ_ECHO = 0.45
NQ_FACT_HEADING = 0.5  # share of the page's facts given a section of their own, headed by one of their noun phrases


def _demonym(entity: str) -> str:
    """A made-up country's people and adjective: Vemoria -> Vemorian, Drakand -> Drakander, Telen -> Telenish."""
    for end, add in (("ia", "n"), ("ora", "n"), ("and", "er"), ("en", "ish"), ("ar", "ian")):
        if entity.endswith(end):
            return entity + add
    return entity + "an"


class _Reading:
    """One page's subject under its names, and how its facts are stated and asked (`held_out`: dev and test)."""

    def __init__(self, rng: random.Random, doc: _Doc, kind: str, sea: str, held_out: bool):
        # kind: what the subject is ("republic"); sea: the made-up sea it lies on, which the intro names.
        self.rng, self.doc, self.kind, self.sea, self.held_out = rng, doc, kind, sea, held_out
        entity = doc.entity
        prefix = rng.choice(("Free", "United", "Federal", "Royal", "Democratic"))
        self.official = f"{prefix} {'Kingdom' if kind == 'kingdom' else 'Republic'} of {entity}"
        self.abbreviation = "".join(w[0] for w in self.official.split() if w[0].isupper())
        self.demonym = _demonym(entity)
        self.capital = None  # set when the page states its capital: a question can name the country by it
        self.echo = None  # (asked key, its noun phrase, the index of its own form or None): see NQ_ECHO

    def noun(self, nps: tuple) -> str:
        """One of the noun phrases, the first (plainest) most often."""
        return nps[0] if len(nps) == 1 or self.rng.random() < NQ_FIRST_NOUN else self.rng.choice(nps[1:])

    # -- statements ---------------------------------------------------------------------------
    def _name(self, entity: str) -> str:
        """The subject as a statement names it: mostly its name, else what it is or its abbreviation."""
        if entity != self.doc.entity:
            return entity  # the neighbour is always named: a fact about it must say whose it is
        r = self.rng.random()
        return entity if r < 0.75 else f"the {self.kind}" if r < 0.9 else f"the {self.abbreviation}"

    def fact(self, key: str, entity: str, value: str, answer_key=None):
        """A sentence stating `key` of `entity`, as (tokens, key, value start, value end)."""
        rng = self.rng
        _, nps, says, _, _ = READING_ATTRIBUTES[key]
        held = self.held_out and entity == self.doc.entity and rng.random() < NQ_HELD_OUT_STATEMENTS
        echo = self.echo is not None and self.echo[0] == key and rng.random() < NQ_ECHO
        np = self.echo[1] if echo else None
        if held:
            template = rng.choice(SAY_NOUN_HELD)
        elif echo:
            own = self.echo[2]
            template = rng.choice(SAY_NOUN) if own is None else says[own % len(says)]
        elif rng.random() < NQ_OWN_SAY:
            template = rng.choice(says)
        else:
            template = rng.choice(SAY_NOUN)
        adj = self.demonym if entity == self.doc.entity else _demonym(entity)
        text = template.replace("{N}", np or self.noun(nps)).replace("{A}", adj).replace("{E}", self._name(entity))
        head, _, tail = text.partition("{V}")
        head, tail, vals = head.split(), tail.split(), value.split()
        toks = head + vals + tail
        toks[0] = toks[0][:1].upper() + toks[0][1:]
        return (toks, answer_key, len(head), len(head) + len(vals))

    def topic(self, t: str, entity: str, answer_key=None):
        """The opening sentence of a topic's paragraph."""
        rng = self.rng
        nps, says, bare = READING_TOPICS[t]
        r = rng.random()
        echo = self.echo is not None and self.echo[0] == "topic:" + t and rng.random() < NQ_ECHO
        np = self.echo[1] if echo else None
        if self.held_out and entity == self.doc.entity and r < NQ_HELD_OUT_STATEMENTS:
            template = rng.choice(OPEN_TOPIC_HELD)
        elif echo:
            template = rng.choice(OPEN_TOPIC)
        elif r < NQ_TOPIC_NOUN:
            template = rng.choice(OPEN_TOPIC)
        else:
            template = bare
        text = template.replace("{N}", np or self.noun(nps)).replace("{P}", says).replace("{E}", self._name(entity))
        toks = text.split()
        toks[0] = toks[0][:1].upper() + toks[0][1:]
        return (toks, answer_key, 0, 0)

    # -- questions ----------------------------------------------------------------------------
    def _subject(self, key: str = "") -> str:
        """The subject as a question names it: its name, what it is, its abbreviation, or a related thing
        (never its capital when the capital is asked)."""
        r, entity = self.rng.random(), self.doc.entity.lower()
        if r < 0.6:
            return entity
        if r < 0.75:
            return f"the {self.kind}"
        if r < 0.85:
            return f"the {self.abbreviation.lower()}"
        if r < 0.95 or self.capital is None or key == "capital":
            return f"the {self.kind} on the {self.sea.lower()} sea"
        return f"the {self.kind} whose capital is {self.capital.lower()}"

    def _form(self, train: tuple, held: tuple) -> str:
        return self.rng.choice(held if self.held_out and self.rng.random() < NQ_HELD_OUT_QUESTIONS else train)

    def ask(self, key: str) -> str:
        """A question for attribute `key`."""
        rng = self.rng
        wh, nps, _, asks, asks_held = READING_ATTRIBUTES[key]
        held = self.held_out and rng.random() < NQ_HELD_OUT_QUESTIONS
        own = rng.random() < NQ_OWN_ASK
        forms = (asks_held if own else ASK_NOUN_HELD) if held else (asks if own else ASK_NOUN)
        i, np = rng.randrange(len(forms)), self.noun(nps)
        self.echo = (key, np, i if own else None)
        return self._fill(forms[i], wh, np, self._subject(key), "")

    def ask_topic(self, t: str) -> str:
        template, np = self._form(ASK_TOPIC, ASK_TOPIC_HELD), self.noun(READING_TOPICS[t][0])
        self.echo = ("topic:" + t, np, None)
        return self._fill(template, "what", np, self._subject(), "")

    def ask_yes_no(self, key: str, value: str) -> str:
        template, np = self._form(ASK_YES_NO, ASK_YES_NO_HELD), self.noun(READING_ATTRIBUTES[key][1])
        self.echo = (key, np, None)
        return self._fill(template, "", np, self._subject(key), value)

    def _fill(self, template: str, wh: str, np: str, subject: str, value: str) -> str:
        text = template.replace("{w}", wh).replace("{n}", np).replace("{a}", self.demonym.lower())
        return text.replace("{e}", subject).replace("{v}", value.lower())


def _reading_question(rng: random.Random, names: _Names, reading: _Reading, answer_type: str, stated: list,
                      topics: list, values: dict):
    """The asked key and the question (`_question`'s choices, asked as `reading` asks)."""
    if answer_type == "LONG" or (answer_type == "NONE" and rng.random() >= NONE_ASKS_ATTRIBUTE):
        pool = topics if answer_type == "LONG" else [t for t in TOPICS if t not in topics]
        t = rng.choice(pool)
        return "topic:" + t, reading.ask_topic(t)
    asked = rng.choice(stated if answer_type != "NONE" else [a for a in ATTRIBUTES if a not in stated])
    if answer_type not in ("YES", "NO"):
        return asked, reading.ask(asked)
    v = values[asked]
    while answer_type == "NO" and v == values[asked]:  # NO: the question names another value of the kind
        v = names.value(ATTRIBUTES[asked][0])
    return asked, reading.ask_yes_no(asked, v)


def _reading_fact_block(page: _NQPage, reading: _Reading, key: str, value: str, where_r: float):
    """The block stating `key` of the page's subject: a long paragraph mostly, else a list item or a table row."""
    rng, entity = page.rng, page.doc.entity
    if key.startswith("topic:"):
        about = TOPICS[key[6:]][3]
        sents = [reading.topic(key[6:], entity, key)]
        sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, len(about)))]
        return page.paragraph(page._para_words(), sents, first=True)  # a section opens with its topic
    if where_r < 0.85:
        fact = reading.fact(key, entity, value, key)
        return page.paragraph(page._para_words(), [fact]) if where_r < 0.7 else page.ul(0, [fact])
    label = rng.choice((ATTRIBUTES[key][1], READING_ATTRIBUTES[key][1][-1].capitalize())).split()
    vals = value.split()
    return page.table([("Tr", [("Th", [(label, None, 0, 0)]), ("Td", [(vals, key, 0, len(vals))])])])


def _reading_body(rng, page: _NQPage, reading: _Reading, stated: list, values: dict, topics: list, asked: str,
                  words: int):
    """`_nq_body` with the facts, topics and the neighbour's copies stated as `reading` states them."""
    doc, names = page.doc, page.names
    # Sections of their own, as an article's: a topic's paragraph under its heading, and some facts under a
    # heading naming them ("Seat of government"). Headings lie outside every candidate: they tell a reader (and
    # the first pass) where to look, not what the answer says.
    own = []
    for k in stated:
        block = _reading_fact_block(page, reading, k, values[k], rng.random())
        if rng.random() < NQ_FACT_HEADING:
            own.append([("H2", reading.noun(READING_ATTRIBUTES[k][1]).capitalize().split()), block])
        else:
            own.append([block])
    own += [[("H2", TOPICS[t][0].split()), _reading_fact_block(page, reading, "topic:" + t, "", 0.0)] for t in topics]
    specials = [ns[0] for ns in own if len(ns) == 1]
    headed = [ns for ns in own if len(ns) == 2]
    # The neighbour's copy of a fact, stated in the same forms: reading whose fact it is tells them apart.
    for k in stated + ([asked] if asked in ATTRIBUTES and asked not in stated else []):
        if rng.random() < (0.8 if k == asked else NQ_DISTRACTOR):
            fact = reading.fact(k, doc.neighbour, names.value(ATTRIBUTES[k][0]))
            specials.append(page.paragraph(page._para_words(), [fact]))
    for t in topics + ([asked[6:]] if asked.startswith("topic:") and asked[6:] not in topics else []):
        if rng.random() < (0.8 if "topic:" + t == asked else NQ_DISTRACTOR):
            specials.append(page.paragraph(page._para_words(), [reading.topic(t, doc.neighbour)], first=True))
    nodes = _nq_sections(rng, page, specials, [], max(0, words - sum(_nq_words(n) for ns in headed for n in ns)))
    for ns in headed:  # before a random section's heading, or at the end
        starts = [i for i, n in enumerate(nodes) if n[0] == "H2"] + [len(nodes)]
        at = rng.choice(starts)
        nodes[at:at] = ns
    return nodes


def make_nq_reading_example(rng: random.Random, answer_type: str, min_words: int, max_words: int,
                            held_out: bool = False) -> dict:
    """One page of the `nq` profile (`make_nq_example`'s pages, questions that need reading); `held_out`:
    a dev or test page, whose questions and facts are sometimes put in forms training never shows."""
    names = _Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = _Doc(rng, entity, names)
    target = min(max_words, max(min_words, round(rng.lognormvariate(math.log(NQ_MEDIAN_WORDS), NQ_SIGMA))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(3, 12))
    topics = rng.sample(list(TOPICS), rng.randint(2, 8))
    kind = rng.choice(("country", "kingdom", "island nation", "republic"))
    reading = _Reading(rng, doc, kind, names.proper(), held_out)
    values = {a: names.value(ATTRIBUTES[a][0]) for a in stated}
    reading.capital = values.get("capital")
    asked, question = _reading_question(rng, names, reading, answer_type, stated, topics, values)
    page = _NQPage(rng, doc)
    nav = [page.run(p.replace("{kind}", kind)) for p in rng.sample(_NAV, 3)]
    head = [("text", [entity, "-", "wikipedia", "<H1>", entity, "</H1>"] + [w for n in nav for w in n])]
    infobox = [("Tr", [('Th_colspan="2"', [([entity], None, 0, 0)])])]
    for k, v in (("Official name", f"{reading.official} ( {reading.abbreviation} )"), ("Demonym", reading.demonym),
                 ("Time zone", f"UTC + {rng.randint(1, 5)}"), ("Calling code", f"+ {rng.randint(200, 999)}")):
        infobox.append(("Tr", [("Th", [(k.split(), None, 0, 0)]), ("Td", [(v.split(), None, 0, 0)])]))
    head.append(("Table", infobox))
    top_nav, refs, bottom_nav = (round(target * rng.uniform(*r)) for r in ((0.02, 0.08), (0.17, 0.38), (0.03, 0.1)))
    head.append(page.text(top_nav, "nav"))
    intro = (f"{entity} , officially the {reading.official} ( {reading.abbreviation} ) , is a small {kind} on the "
             f"{reading.sea} Sea .").split()
    head.append(page.paragraph(page._para_words(), [(intro, None, 0, 0)], first=True))
    used = sum(_nq_words(n) for n in head)
    body = _reading_body(rng, page, reading, stated, values, topics, asked, max(0, target - used - refs - bottom_nav))
    tail = [("H2", ["References"]), page.text(refs, "refs"), ("H2", ["External", "links"]), page.text(bottom_nav, "nav")]
    tokens, cands, where = _nq_render(head + body + tail)
    answer = None
    if answer_type != "NONE":
        top, inner, vs, ve = where[asked]
        nested = inner != top and rng.random() < NQ_NESTED_GOLD
        answer = {"candidate_index": inner if nested else top, "short": [(vs, ve)] if answer_type == "SHORT" else [],
                  "yes_no": answer_type if answer_type in ("YES", "NO") else "NONE"}
    return {"question": question, "tokens": tokens, "candidates": cands, "answer": answer, "entity": entity}


def _annotation(rng: random.Random, answer, candidates) -> dict:
    """One annotator's answer in the simplified-NQ layout; `answer` None is the null annotation."""
    if answer is None:
        long, shorts, yes_no = {"start_token": -1, "candidate_index": -1, "end_token": -1}, [], "NONE"
    else:
        c = candidates[answer["candidate_index"]]
        long = {"start_token": c["start_token"], "candidate_index": answer["candidate_index"], "end_token": c["end_token"]}
        shorts, yes_no = [{"start_token": s, "end_token": e} for s, e in answer["short"]], answer["yes_no"]
    return {"yes_no_answer": yes_no, "long_answer": long, "short_answers": shorts, "annotation_id": rng.getrandbits(64)}


def _annotations(rng: random.Random, answer, candidates, num_annotators: int) -> list:
    """One annotation (train) or five (dev, test gold): each annotator finds an answer with prob 0.8, one at least."""
    if num_annotators == 1:
        return [_annotation(rng, answer, candidates)]
    found = [answer is not None and rng.random() < ANNOTATOR_RECALL for _ in range(num_annotators)]
    if answer is not None and not any(found):
        found[rng.randrange(num_annotators)] = True
    return [_annotation(rng, answer if f else None, candidates) for f in found]


def answer_mix(types=None) -> dict:
    """ANSWER_MIX, or its shares of `types` alone scaled to sum 1 (`--answer-types YES,NO`: two YES to a NO)."""
    if types is None:
        return dict(ANSWER_MIX)
    unknown = [t for t in types if t not in ANSWER_MIX]
    if unknown or not types:
        raise ValueError(f"answer types must be some of {', '.join(ANNOTATION_TYPES)}, got {','.join(types) or 'none'}")
    total = sum(ANSWER_MIX[t] for t in set(types))
    return {t: ANSWER_MIX[t] / total for t in ANSWER_MIX if t in types}


def _answer_types(rng: random.Random, n: int, mix: dict = ANSWER_MIX) -> list:
    """Exactly the `mix` shares (largest remainder), shuffled: small splits keep the mix too."""
    exact = {t: n * p for t, p in mix.items()}
    counts = {t: int(x) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: counts[t] - exact[t])[: n - sum(counts.values())]:
        counts[t] += 1
    types = [t for t in ANNOTATION_TYPES for _ in range(counts.get(t, 0))]
    rng.shuffle(types)
    return types


def generate_split(seed: int, n: int, num_annotators: int, min_words: int, max_words: int, used_ids: set,
                   profile: str = "easy", mix: dict = ANSWER_MIX, held_out: bool = False):
    """Yield (record with int example_id, answer type) for one split; its own Random, so split sizes don't interact.

    `held_out`: a dev or test split, which a profile with held-out phrasings (HELD_OUT_PROFILES) asks in them."""
    rng = random.Random(seed)
    make = PROFILES[profile][0]
    extra = {"held_out": held_out} if profile in HELD_OUT_PROFILES else {}
    for answer_type in _answer_types(rng, n, mix):
        ex = make(rng, answer_type, min_words, max_words, **extra)
        example_id = rng.randrange(-2 ** 63, 2 ** 63)
        while example_id in used_ids:  # ids are unique across train, dev and test
            example_id = rng.randrange(-2 ** 63, 2 ** 63)
        used_ids.add(example_id)
        record = {
            "document_text": " ".join(ex["tokens"]),
            "long_answer_candidates": ex["candidates"],
            "question_text": ex["question"],
            "annotations": _annotations(rng, ex["answer"], ex["candidates"], num_annotators),
            "document_url": (f"https://en.wikipedia.org//w/index.php?title={ex['entity']}"
                             f"&amp;oldid={rng.randint(10**8, 9 * 10**8)}"),
            "example_id": example_id,
        }
        yield record, answer_type


class _SplitStats:
    def __init__(self, name: str, paths: list):
        self.name, self.paths, self.types, self.lengths, self.num_cands = name, paths, Counter(), [], []

    def add(self, record: dict, answer_type: str) -> None:
        self.types[answer_type] += 1
        self.lengths.append(record["document_text"].count(" ") + 1)
        self.num_cands.append(len(record["long_answer_candidates"]))

    def line(self) -> str:
        def mmm(xs):
            return f"{min(xs)}/{int(statistics.median(xs))}/{max(xs)}"
        mix = " ".join(f"{t} {self.types[t]}" for t in ANNOTATION_TYPES)
        return (f"{self.name:<5} {len(self.lengths):>6} examples | {mix} | words min/median/max {mmm(self.lengths)} | "
                f"candidates {mmm(self.num_cands)} | " + ", ".join(str(p) for p in self.paths))


def write_corpus(out_dir, seed: int = 0, num_train: int = 1000, num_dev: int = 100, num_test: int = 100,
                 min_words=None, max_words=None, profile: str = "easy", answer_types=None) -> list:
    """Write the four files into `out_dir`; return one _SplitStats per split (train, dev, test).

    min_words/max_words default to the profile's bounds (PROFILES); `answer_types` keeps only those
    types of the mix (`answer_mix`)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    mix = answer_mix(answer_types)
    min_words = PROFILES[profile][1] if min_words is None else min_words
    max_words = PROFILES[profile][2] if max_words is None else max_words
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    master = random.Random(seed)
    seeds = [master.getrandbits(64) for _ in range(3)]  # train, dev, test
    used_ids: set = set()
    summary = []
    for name, split_seed, n, num_annotators in (("train", seeds[0], num_train, 1), ("dev", seeds[1], num_dev, NUM_ANNOTATORS),
                                                ("test", seeds[2], num_test, NUM_ANNOTATORS)):
        paths = [out / f"simplified-nq-{name}.jsonl"] + ([out / "simplified-nq-test-gold.jsonl"] if name == "test" else [])
        stats = _SplitStats(name, paths)
        files = [open(p, "w", encoding="utf-8", newline="\n") for p in paths]
        try:
            for record, answer_type in generate_split(split_seed, n, num_annotators, min_words, max_words, used_ids,
                                                      profile, mix, held_out=name != "train"):
                stats.add(record, answer_type)
                if name == "test":
                    # Kaggle's test file: id as a JSON string, no annotations, no url; gold keeps them, same id text.
                    record["example_id"] = str(record["example_id"])
                    files[1].write(json.dumps(record) + "\n")
                    record = {k: record[k] for k in ("example_id", "question_text", "document_text", "long_answer_candidates")}
                files[0].write(json.dumps(record) + "\n")
        finally:
            for f in files:
                f.close()
        summary.append(stats)
    return summary


# name -> (document maker, default shortest and longest document in words). `easy` is the demo's and
# the tests' corpus; `nq` is shaped like real NQ pages (log-normal lengths, median ~4,600 words) with
# questions that need reading; `nq-lexical` is the same pages with questions in the statements' words
# (the `nq` profile until its questions were rephrased: the same bytes for the same arguments).
PROFILES = {"easy": (make_example, 300, 3000), "nq": (make_nq_reading_example, 1000, 40000),
            "nq-lexical": (make_nq_example, 1000, 40000)}
HELD_OUT_PROFILES = ("nq",)  # profiles whose dev and test ask in forms their training split never shows


def _parse_args(argv=None) -> argparse.Namespace:
    from solution.common import cli  # both --a-b and --a_b spellings
    parser = cli.ArgumentParser(prog="python -m solution.synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the four simplified-nq-*.jsonl files into")
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed; the same arguments give byte-identical files (default: %(default)s)")
    parser.add_argument("--num-train", type=int, default=1000,
                        help="training examples (one annotation each) (default: %(default)s)")
    parser.add_argument("--num-dev", type=int, default=100, help="dev examples (five annotations each) (default: %(default)s)")
    parser.add_argument("--num-test", type=int, default=100,
                        help="test examples (test file without answers, plus its gold) (default: %(default)s)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="easy",
                        help="easy: short learnable pages (the demo's); nq: pages shaped like real NQ whose questions "
                             "need reading, some dev and test phrasings held out from training; nq-lexical: the same "
                             "pages, questions in the statements' words (default: %(default)s)")
    parser.add_argument("--min-words", type=int, default=None,
                        help="shortest document, in words (at least 200) (default: easy 300, nq 1000)")
    parser.add_argument("--max-words", type=int, default=None, help="longest document, in words (default: easy 3000, nq 40000)")
    parser.add_argument("--answer-types", default=None, metavar="TYPE,...",
                        help=f"only documents of these answer types (of {', '.join(ANNOTATION_TYPES)}), in the mix's own "
                             "shares among them: YES,NO gives the dozens of yes/no questions a 1.5%% share would need "
                             "thousands of pages for (default: the whole mix)")
    args = parser.parse_args(argv)
    if args.answer_types is not None:
        args.answer_types = [t.strip().upper() for t in args.answer_types.split(",") if t.strip()]
        try:
            answer_mix(args.answer_types)
        except ValueError as e:
            parser.error(f"--answer-types: {e}")
    args.min_words = PROFILES[args.profile][1] if args.min_words is None else args.min_words
    args.max_words = PROFILES[args.profile][2] if args.max_words is None else args.max_words
    for name in ("num_train", "num_dev", "num_test"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (an empty file is not a valid NQ file)")
    if args.min_words < 200:
        parser.error("--min-words must be at least 200: an article needs room for a title, an answer and a distractor")
    if args.max_words < args.min_words:
        parser.error("--max-words must be at least --min-words")
    return args


def main(argv=None) -> int:
    args = _parse_args(argv)
    start = time.perf_counter()
    try:
        check_writable(args.out, "--out", create_dir=True)  # a file there, or a folder that cannot be made
        summary = write_corpus(args.out, args.seed, args.num_train, args.num_dev, args.num_test, args.min_words,
                               args.max_words, args.profile, args.answer_types)
    except (ValueError, OSError) as e:  # OSError: a full disk or a file that cannot be written, named by open()
        print(f"error: {e}", file=sys.stderr)
        return 2
    for stats in summary:
        print(stats.line())
    print(f"wrote {sum(len(s.paths) for s in summary)} files to {args.out} in {time.perf_counter() - start:.1f}s "
          f"(profile {args.profile}, seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
