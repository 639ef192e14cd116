"""Pages shaped like real NQ (log-normal lengths, text outside every candidate, nested lists and tables,
the neighbour's facts): the `nq-lexical` profile's questions in the statements' words, and the `nq`
profile's questions that need reading (synonyms, other word orders and parts of speech, the subject's
other names, phrasings held out of training).
"""


import math
import random
from typing import Callable, Optional

from solution.data.synth.easy import (
    ATTRIBUTES,
    GENERIC_HEADINGS,
    NONE_ASKS_ATTRIBUTE,
    TOPICS,
    Doc,
    Names,
    make_question,
    make_sentence,
)
from solution.data.synth.nq_render import nq_words, page_record

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
NQ_DISTRACTOR = 0.6  # chance a stated attribute or topic is also stated about the neighbour
_MONTHS = ("January", "March", "April", "June", "July", "September", "October", "December")
_NAV = ("Jump to : navigation , search", "From Wikipedia , the free encyclopedia",
        "This article is about the {kind} . For other uses , see {E} ( disambiguation ) .",
        "Coordinates : {K} ° N {K} ° E", "Part of a series on the History of {E}")


class NQPage:
    """Builds one nq-profile page: plain-text runs, long paragraphs, nested lists and tables."""

    def __init__(self, rng: random.Random, doc: Doc):
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

    # A filler block is a paragraph below the first share of draws, a list below the second, then a table.
    BLOCK_SHARES = (0.72, 0.87)

    def block(self) -> tuple:
        r = self.rng.random()
        if r < self.BLOCK_SHARES[0]:
            return self.paragraph(self.para_words())
        if r < self.BLOCK_SHARES[1]:
            return self.ul()
        if r < 0.95:
            return self.table()
        return ("text", self.run("Main article : {E} {W}") if r < 0.97 else self.text(self.rng.randint(20, 120), "nav")[1])

    def para_words(self) -> int:
        return round(math.exp(self.rng.uniform(math.log(45), math.log(280))))


def _nq_fact_block(page: NQPage, entity: str, key: str, value: str, where_r: float):
    """The block stating `key`: a long paragraph mostly, else a list item or a table row."""
    rng = page.rng
    if key.startswith("topic:"):
        heading, openings, _, about = TOPICS[key[6:]]
        sents = [make_sentence(rng.choice(openings), entity, key)]
        sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, len(about)))]
        return page.paragraph(page.para_words(), sents, first=True)  # a section opens with its topic
    fact = make_sentence(rng.choice(ATTRIBUTES[key][2]), entity, key, value)
    if where_r < 0.7:
        return page.paragraph(page.para_words(), [fact])
    if where_r < 0.85:
        return page.ul(0, [fact])
    label, vals = ATTRIBUTES[key][1].split(), value.split()
    return page.table([("Tr", [("Th", [(label, None, 0, 0)]), ("Td", [(vals, key, 0, len(vals))])])])


def _nq_body(rng, page: NQPage, entity: str, stated: list, values: dict, topics: list, asked: str, words: int):
    """Sections (H2 + blocks) of about `words` words, the facts, topics and neighbour distractors placed in them."""
    doc, names = page.doc, page.names
    specials = [_nq_fact_block(page, entity, k, values[k], rng.random()) for k in stated]
    specials += [_nq_fact_block(page, entity, "topic:" + t, "", 0.0) for t in topics]
    # Distractors: the neighbour stated in the same words (no key: never an answer). The asked key
    # gets one more often, so a no-answer question's words are usually on the page.
    # Lists, not sets: a set of strings iterates in per-process hash order, which would change the draws.
    for k in stated + ([asked] if asked in ATTRIBUTES and asked not in stated else []):
        if rng.random() < (0.8 if k == asked else NQ_DISTRACTOR):
            toks = make_sentence(rng.choice(ATTRIBUTES[k][2]), doc.neighbour, None, names.value(ATTRIBUTES[k][0]))[0]
            specials.append(page.paragraph(page.para_words(), [(toks, None, 0, 0)]))
    for t in topics + ([asked[6:]] if asked.startswith("topic:") and asked[6:] not in topics else []):
        if rng.random() < (0.8 if "topic:" + t == asked else NQ_DISTRACTOR):
            toks = rng.choice(TOPICS[t][1]).format(E=doc.neighbour).split()
            specials.append(page.paragraph(page.para_words(), [(toks, None, 0, 0)], first=True))
    return nq_sections(rng, page, specials, topics, words)


def nq_sections(rng, page: NQPage, specials: list, topics: list, words: int) -> list:
    """Sections (H2 + filler blocks) of about `words` words with the `specials` blocks placed among them."""
    names = page.names
    sections, used = [], sum(nq_words(b) for b in specials)
    headings = [TOPICS[t][0] for t in topics] + list(GENERIC_HEADINGS)
    while used < words or not sections:
        h = headings.pop(0) if headings else names.proper()
        blocks = [page.block() for _ in range(rng.randint(1, 6))]
        used += sum(nq_words(b) for b in blocks) + 1
        sections.append([("H2", h.split())] + blocks)
    for b in specials:
        s = rng.choice(sections)
        s.insert(rng.randint(1, len(s)), b)
    return [n for s in sections for n in s]


def make_nq_example(rng: random.Random, answer_type: str, min_words: int, max_words: int) -> dict:
    """One nq-profile document, its question and true answer (the easy profile's `make_example` dict)."""
    names = Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = Doc(rng, entity, names)
    target = min(max_words, max(min_words, round(rng.lognormvariate(math.log(NQ_MEDIAN_WORDS), NQ_SIGMA))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(3, 12))
    topics = rng.sample(list(TOPICS), rng.randint(2, 8))
    values, asked, question = make_question(rng, names, entity, answer_type, stated, topics)
    page = NQPage(rng, doc)
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
    intro = make_sentence(f"{{E}} is a small {kind} on the {names.proper()} Sea .", entity)
    head.append(page.paragraph(page.para_words(), [intro]))
    used = sum(nq_words(n) for n in head)
    body = _nq_body(rng, page, entity, stated, values, topics, asked, max(0, target - used - refs - bottom_nav))
    tail = [("H2", ["References"]), page.text(refs, "refs"), ("H2", ["External", "links"]), page.text(bottom_nav, "nav")]
    return page_record(rng, head + body + tail, asked, answer_type, question, entity)


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


class Reading:
    """One page's subject under its names, and how its facts are stated and asked (`held_out`: dev and test)."""

    def __init__(self, rng: random.Random, doc: Doc, kind: str, sea: str, held_out: bool):
        # kind: what the subject is ("republic"); sea: the made-up sea it lies on, which the intro names.
        self.rng, self.doc, self.kind, self.sea, self.held_out = rng, doc, kind, sea, held_out
        entity = doc.entity
        prefix = rng.choice(("Free", "United", "Federal", "Royal", "Democratic"))
        self.official = f"{prefix} {'Kingdom' if kind == 'kingdom' else 'Republic'} of {entity}"
        self.abbreviation = "".join(w[0] for w in self.official.split() if w[0].isupper())
        self.demonym = _demonym(entity)
        self.capital = None  # set when the page states its capital: a question can name the country by it
        self.echo = None  # (asked key, its noun phrase, the index of its own form or None): see NQ_ECHO
        # Whether the question was put in a held-out form (set as it is asked): dev and test are scored apart
        # on forms training saw and forms it did not. A plain record: it draws nothing.
        self.asked_held_out = False

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
        # The same draws as ever (a profile's bytes depend on them): one random() on held-out pages, one choice.
        self.asked_held_out = bool(self.held_out and self.rng.random() < NQ_HELD_OUT_QUESTIONS)
        return self.rng.choice(held if self.asked_held_out else train)

    def ask(self, key: str) -> str:
        """A question for attribute `key`."""
        rng = self.rng
        wh, nps, _, asks, asks_held = READING_ATTRIBUTES[key]
        self.asked_held_out = bool(self.held_out and rng.random() < NQ_HELD_OUT_QUESTIONS)
        own = rng.random() < NQ_OWN_ASK
        forms = (asks_held if own else ASK_NOUN_HELD) if self.asked_held_out else (asks if own else ASK_NOUN)
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


def reading_question(rng: random.Random, names: Names, reading: Reading, answer_type: str, stated: list,
                     topics: list, values: dict, no_value: Optional[Callable[[str], str]] = None):
    """The asked key and the question (`make_question`'s choices, asked as `reading` asks). A NO question
    names the value `no_value(asked)` picks (a profile's own choice), or another value of the kind where that
    is the true one or no `no_value` is given."""
    if answer_type == "LONG" or (answer_type == "NONE" and rng.random() >= NONE_ASKS_ATTRIBUTE):
        pool = topics if answer_type == "LONG" else [t for t in TOPICS if t not in topics]
        t = rng.choice(pool)
        return "topic:" + t, reading.ask_topic(t)
    asked = rng.choice(stated if answer_type != "NONE" else [a for a in ATTRIBUTES if a not in stated])
    if answer_type not in ("YES", "NO"):
        return asked, reading.ask(asked)
    v = no_value(asked) if answer_type == "NO" and no_value else values[asked]
    while answer_type == "NO" and v == values[asked]:  # NO: the question names another value of the kind
        v = names.value(ATTRIBUTES[asked][0])
    return asked, reading.ask_yes_no(asked, v)


def reading_fact_block(page: NQPage, reading: Reading, key: str, value: str, where_r: float):
    """The block stating `key` of the page's subject: a long paragraph mostly, else a list item or a table row."""
    rng, entity = page.rng, page.doc.entity
    if key.startswith("topic:"):
        about = TOPICS[key[6:]][3]
        sents = [reading.topic(key[6:], entity, key)]
        sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, len(about)))]
        return page.paragraph(page.para_words(), sents, first=True)  # a section opens with its topic
    if where_r < 0.85:
        fact = reading.fact(key, entity, value, key)
        return page.paragraph(page.para_words(), [fact]) if where_r < 0.7 else page.ul(0, [fact])
    label = rng.choice((ATTRIBUTES[key][1], READING_ATTRIBUTES[key][1][-1].capitalize())).split()
    vals = value.split()
    return page.table([("Tr", [("Th", [(label, None, 0, 0)]), ("Td", [(vals, key, 0, len(vals))])])])


def _reading_body(rng, page: NQPage, reading: Reading, stated: list, values: dict, topics: list, asked: str,
                  words: int):
    """`_nq_body` with the facts, topics and the neighbour's copies stated as `reading` states them."""
    doc, names = page.doc, page.names
    # Sections of their own, as an article's: a topic's paragraph under its heading, and some facts under a
    # heading naming them ("Seat of government"). Headings lie outside every candidate: they tell a reader (and
    # the first pass) where to look, not what the answer says.
    own = []
    for k in stated:
        block = reading_fact_block(page, reading, k, values[k], rng.random())
        if rng.random() < NQ_FACT_HEADING:
            own.append([("H2", reading.noun(READING_ATTRIBUTES[k][1]).capitalize().split()), block])
        else:
            own.append([block])
    own += [[("H2", TOPICS[t][0].split()), reading_fact_block(page, reading, "topic:" + t, "", 0.0)] for t in topics]
    specials = [ns[0] for ns in own if len(ns) == 1]
    headed = [ns for ns in own if len(ns) == 2]
    # The neighbour's copy of a fact, stated in the same forms: reading whose fact it is tells them apart.
    for k in stated + ([asked] if asked in ATTRIBUTES and asked not in stated else []):
        if rng.random() < (0.8 if k == asked else NQ_DISTRACTOR):
            fact = reading.fact(k, doc.neighbour, names.value(ATTRIBUTES[k][0]))
            specials.append(page.paragraph(page.para_words(), [fact]))
    for t in topics + ([asked[6:]] if asked.startswith("topic:") and asked[6:] not in topics else []):
        if rng.random() < (0.8 if "topic:" + t == asked else NQ_DISTRACTOR):
            specials.append(page.paragraph(page.para_words(), [reading.topic(t, doc.neighbour)], first=True))
    nodes = nq_sections(rng, page, specials, [], max(0, words - sum(nq_words(n) for ns in headed for n in ns)))
    for ns in headed:  # before a random section's heading, or at the end
        starts = [i for i, n in enumerate(nodes) if n[0] == "H2"] + [len(nodes)]
        at = rng.choice(starts)
        nodes[at:at] = ns
    return nodes


def make_nq_reading_example(rng: random.Random, answer_type: str, min_words: int, max_words: int,
                            held_out: bool = False) -> dict:
    """One page of the `nq` profile (`make_nq_example`'s pages, questions that need reading); `held_out`:
    a dev or test page, whose questions and facts are sometimes put in forms training never shows."""
    names, doc, reading, target, stated, topics, values = reading_page_plan(rng, Doc, Reading, min_words,
                                                                              max_words, held_out)
    entity, kind = doc.entity, reading.kind
    asked, question = reading_question(rng, names, reading, answer_type, stated, topics, values)
    page = NQPage(rng, doc)
    head = [title_and_nav(rng, page, kind), ("Table", infobox_rows(rng, entity, reading))]
    top_nav, refs, bottom_nav = (round(target * rng.uniform(*r)) for r in ((0.02, 0.08), (0.17, 0.38), (0.03, 0.1)))
    head.append(page.text(top_nav, "nav"))
    intro = (f"{entity} , officially the {reading.official} ( {reading.abbreviation} ) , is a small {kind} on the "
             f"{reading.sea} Sea .").split()
    head.append(page.paragraph(page.para_words(), [(intro, None, 0, 0)], first=True))
    used = sum(nq_words(n) for n in head)
    body = _reading_body(rng, page, reading, stated, values, topics, asked, max(0, target - used - refs - bottom_nav))
    tail = [("H2", ["References"]), page.text(refs, "refs"), ("H2", ["External", "links"]), page.text(bottom_nav, "nav")]
    return page_record(rng, head + body + tail, asked, answer_type, question, entity)


def reading_page_plan(rng: random.Random, doc_cls, reading_cls, min_words: int, max_words: int, held_out: bool):
    """What a reading page is about, drawn in this order (a profile's bytes depend on it): (names, doc,
    reading, target words, stated attributes, topics, {attribute: value})."""
    names = Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = doc_cls(rng, entity, names)
    target = min(max_words, max(min_words, round(rng.lognormvariate(math.log(NQ_MEDIAN_WORDS), NQ_SIGMA))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(3, 12))
    topics = rng.sample(list(TOPICS), rng.randint(2, 8))
    kind = rng.choice(("country", "kingdom", "island nation", "republic"))
    reading = reading_cls(rng, doc, kind, names.proper(), held_out)
    values = {a: names.value(ATTRIBUTES[a][0]) for a in stated}
    reading.capital = values.get("capital")
    return names, doc, reading, target, stated, topics, values


def title_and_nav(rng: random.Random, page: NQPage, kind: str) -> tuple:
    """The page's opening text: its title as NQ's pages open, and three navigation runs."""
    entity = page.doc.entity
    nav = [page.run(p.replace("{kind}", kind)) for p in rng.sample(_NAV, 3)]
    return ("text", [entity, "-", "wikipedia", "<H1>", entity, "</H1>"] + [w for n in nav for w in n])


def infobox_rows(rng: random.Random, entity: str, reading: Reading) -> list:
    """The infobox's heading row and its four fixed rows."""
    rows = [("Tr", [('Th_colspan="2"', [([entity], None, 0, 0)])])]
    for k, v in (("Official name", f"{reading.official} ( {reading.abbreviation} )"), ("Demonym", reading.demonym),
                 ("Time zone", f"UTC + {rng.randint(1, 5)}"), ("Calling code", f"+ {rng.randint(200, 999)}")):
        rows.append(("Tr", [("Th", [(k.split(), None, 0, 0)]), ("Td", [(v.split(), None, 0, 0)])]))
    return rows
