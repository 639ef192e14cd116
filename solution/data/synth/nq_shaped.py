"""The `nq-shaped` profile: the `nq` profile's pages and questions (nq_pages.py), shaped like real NQ where it
decides recipes. What it changes, each measured by `python -m solution.corpus_stats` (SHAPE_ROWS) against the
real lines:

- the asked fact sits near the top of the page, as real NQ's gold long answers do: the intro paragraph
  states the page's main facts (the first paragraph is the gold about a third of the time, the first
  candidate about a sixth), the infobox holds some as rows, and a fact stated further down is placed by a
  rank drawn towards the top (`_body_rank`) instead of anywhere;
- questions name their subject as a self-contained search query does: the country's name (or its
  demonym) almost always, "the kingdom" or "the frv" rarely;
- filler sentences are composed (`compose_filler`: openers, subjects, verbs, objects, clauses) rather than
  drawn from 46 fixed sentences, so the answer is not the one sentence of an unfamiliar shape;
- a NO question names a value that is on the page (the neighbour's, or another attribute's of the same
  kind) about half the time, so whether the value appears does not give the polarity away.

Lengths, candidates, the question forms (held out on dev and test as in `nq`) and the statements' forms
are the `nq` profile's. Unlike `nq`, each line says which kind of form its question was asked in: a top-level
`"question_form"`, "seen" (a form training shows; every training line) or "held_out", so a test score can be
split by it (`python -m solution.evaluate --split-by question_form`).
"""


import random

from solution.data.synth.easy import ATTRIBUTES, TOPICS, Doc, Names
from solution.data.synth.nq_pages import (
    NQ_DISTRACTOR,
    NQ_FACT_HEADING,
    READING_ATTRIBUTES,
    NQPage,
    Reading,
    infobox_rows,
    nq_sections,
    reading_fact_block,
    reading_page_plan,
    reading_question,
    title_and_nav,
)
from solution.data.synth.nq_render import NQ_CANDIDATE_TAGS, nq_words, page_record

# Where the asked fact is stated, for a question about an attribute: the intro, an infobox row, or the body.
# Real NQ (49 training + 10 dev lines): the first top-level <P> is the gold on 0.33 of answerable pages, the
# first top-level candidate on 0.17, and 0.57 of gold long answers lie in the first tenth of the page.
SHAPED_ASKED_IN_INTRO = 0.5
SHAPED_ASKED_IN_INFOBOX = 0.15
SHAPED_FACT_IN_INTRO = 0.35  # the other stated facts: the intro states the page's main facts, as a lead does
SHAPED_FACT_IN_INFOBOX = 0.15
SHAPED_INTRO_FACTS = 4  # at most this many facts in the intro
SHAPED_INFOBOX_FIRST = 0.72  # real lines: 0.70 of pages open with a table (the infobox), the rest with the lead
SHAPED_BODY_TOP_TENTH = 0.3  # a fact stated in the body lies in the page's first tenth this often
SHAPED_NAMES_SUBJECT = 0.88  # questions naming the page's subject by name (real lines: 0.88 hold a title word)
SHAPED_NAMES_KIND = 0.3  # of those, naming what it is too ("the kingdom of vemoria"), as a query adds context
SHAPED_UNECHOED = 0.7  # facts stated without the question's wording though `nq` would echo it (a fuller lead
# holds more of a question's words: this keeps the question/answer overlap at the real lines')
SHAPED_TOPIC_SENTENCES = 1  # at most this many of a topic's fixed sentences in its paragraph (the rest composed)
SHAPED_NO_VALUE_ON_PAGE = 0.5  # NO questions whose (wrong) value is stated elsewhere on the page

# The composed filler's parts. Words that questions ask with (capital, river, language, founded ...) stay out,
# so filler neither answers nor matches a question; {C} {P} {Y} {N} {G} {D} are Doc's slots.
_OPENERS = ("In {Y} ,", "After {Y} ,", "Before {Y} ,", "By {Y} ,", "Later ,", "For many years ,", "At first ,",
            "According to {P} ,", "Under {P} ,", "In the {D} ,", "Around {Y} ,", "Even then ,", "Soon afterwards ,",
            "During the {EVENT} ,", "Until {Y} ,", "Each {SEASON} ,", "In those years ,", "Since {Y} ,")
_GROUPS = ("farmers", "merchants", "monks", "fishermen", "traders", "settlers", "villagers", "soldiers", "craftsmen",
           "pilgrims", "scholars", "shepherds", "sailors", "builders", "officials", "miners", "weavers", "priests",
           "students", "nobles", "masons", "carters", "smiths", "clerks", "guards", "herders")
_PLACES = ("monastery", "fortress", "market hall", "bridge", "mill", "chapel", "library", "school", "castle",
           "museum", "square", "tower", "quarry", "inn", "granary", "watchtower", "abbey", "customs house",
           "barracks", "workshop", "courthouse", "hospital", "lighthouse", "shipyard", "warehouse", "orchard")
_TERRAIN = ("hills", "valleys", "passes", "marshes", "plains", "forests", "cliffs", "uplands", "lowlands", "islands",
            "dunes", "moors", "gorges", "meadows", "ridges", "heaths", "wetlands", "foothills")
_EVENTS = ("flood", "fire", "war", "famine", "storm", "drought", "plague", "siege", "earthquake", "rebellion",
           "blockade", "fever", "unrest", "frost", "landslide", "uprising")
_ADJECTIVES = ("old", "new", "small", "wooden", "stone", "narrow", "ruined", "busy", "quiet", "walled", "upper",
               "lower", "famous", "forgotten", "ancient", "crowded", "empty", "restored")
_WRITINGS = ("account", "poem", "letter", "chronicle", "report", "guide", "diary", "survey", "ballad", "sermon",
             "pamphlet", "register")
_SEASONS = ("spring", "summer", "autumn", "winter")
_SUBJECTS = ("{P}", "{P}", "the {GROUP}", "the {GROUP} of {C}", "{GROUP} from {C}", "many {GROUP}", "a few {GROUP}",
             "the {ADJ} {PLACE}", "the {PLACE} at {C}", "local {GROUP}", "the {GROUP} of the {TERRAIN}",
             "{P} and {P}", "a group of {GROUP}", "the {ADJ} {PLACE} of {C}")
_PREDICATES = ("built a {ADJ} {PLACE} near {C}", "repaired the {PLACE} of {C}", "visited {C} twice",
               "described the {TERRAIN} near {C}", "carried {G} across the {TERRAIN}", "mapped the {D}ern {TERRAIN}",
               "moved to {C}", "wrote a {ADJ} {WRITING} about the {EVENT}", "paid for the {ADJ} {PLACE}",
               "opened a {PLACE} in {C}", "kept a {WRITING} of the {EVENT}", "rebuilt the {PLACE} after the {EVENT}",
               "traded {G} for {G}", "guarded the {TERRAIN} above {C}", "left {C} for {N}",
               "settled in the {TERRAIN} to the {D}", "met in the {PLACE} of {C}", "sold {G} at {C}",
               "drained the {TERRAIN} around {C}", "fled the {EVENT}", "lost the {PLACE} to the {EVENT}",
               "rarely crossed the {TERRAIN}", "lived near the {ADJ} {PLACE}", "copied a {ADJ} {WRITING}",
               "stored {G} in the {PLACE}", "walked from {C} to {C}", "planted {G} in the {TERRAIN}",
               "recorded {K} households in {C}", "gathered at the {PLACE} every {SEASON}", "survived the {EVENT}")
_CLAUSES = ("in {Y}", "after the {EVENT} of {Y}", "with the help of {P}", "on the way to {C}",
            "during the {EVENT}", "because of the {EVENT}", "for {N} merchants", "despite the {EVENT}",
            "before the {SEASON} rains", "until the {EVENT} of {Y}", "as {P} later wrote", "while {GROUP} watched",
            "which stood until {Y}", "where {GROUP} still meet", "though few {GROUP} stayed", "each {SEASON}")
_SIZES = ("small", "mountainous", "hilly", "coastal", "sparsely populated", "densely populated", "rugged", "fertile")
_LIES = ("on", "on the shore of", "along", "bordering", "in the north of", "in the south of", "facing")
_PARTS = {"GROUP": _GROUPS, "PLACE": _PLACES, "TERRAIN": _TERRAIN, "EVENT": _EVENTS, "ADJ": _ADJECTIVES,
          "WRITING": _WRITINGS, "SEASON": _SEASONS}


def compose_filler(rng: random.Random, slot) -> list:
    """A filler sentence composed from an opener, a subject, a predicate and a clause (each part optional
    but the subject and predicate); `slot(letter)` draws Doc's slots ({C} a city, {P} a person, ...)."""
    parts = []
    if rng.random() < 0.2:  # openers and clauses this often: sentences as long as FILLER's (11 words)
        parts.append(rng.choice(_OPENERS))
    parts += [rng.choice(_SUBJECTS), rng.choice(_PREDICATES)]
    if rng.random() < 0.3:
        parts.append(rng.choice(_CLAUSES))
    out = []
    for tok in " ".join(parts).split():
        if tok.startswith("{") and "}" in tok:
            name, rest = tok[1:].split("}", 1)
            word = rng.choice(_PARTS[name]) if name in _PARTS else slot(name)
            out.extend((word + rest).split())
        else:
            out.append(tok)
    out = [("an" if w == "a" and nxt[:1] in "aeiou" else w) for w, nxt in zip(out, out[1:] + [""])]
    out[0] = out[0][:1].upper() + out[0][1:]
    return out + ["."]


class _ShapedDoc(Doc):
    """Doc whose filler sentences are composed (`compose_filler`), not drawn from FILLER's 46."""

    def filler(self):
        return (compose_filler(self.rng, self._slot), None, 0, 0)


class _ShapedPage(NQPage):
    """NQPage with somewhat more lists and tables among its filler blocks: the lead, the infobox rows and fewer
    blocks of their own for the facts would otherwise leave fewer candidates a page than `nq` has (real: more)."""

    BLOCK_SHARES = (0.64, 0.84)


class _ShapedReading(Reading):
    """Reading whose questions name the subject as a search query does: by its name, mostly."""

    def fact(self, key: str, entity: str, value: str, answer_key=None):
        return self._unechoed(super().fact, key, entity, value, answer_key)

    def topic(self, t: str, entity: str, answer_key=None):
        return self._unechoed(super().topic, t, entity, answer_key)

    def _unechoed(self, state, *args):
        """`state(*args)`, SHAPED_UNECHOED of the time as if the question had not been asked in its words."""
        if self.echo is None or self.rng.random() >= SHAPED_UNECHOED:
            return state(*args)
        echo, self.echo = self.echo, None
        try:
            return state(*args)
        finally:
            self.echo = echo

    def _subject(self, key: str = "") -> str:
        rng, entity = self.rng, self.doc.entity.lower()
        if rng.random() < SHAPED_NAMES_SUBJECT:
            return f"the {self.kind} of {entity}" if rng.random() < SHAPED_NAMES_KIND else entity
        r = rng.random()  # the rest: Reading's other names for it, in its proportions
        if r < 0.4:
            return f"the {self.kind}"
        if r < 0.65 or self.capital is None or key == "capital":
            return f"the {self.abbreviation.lower()}" if r < 0.65 else f"the {self.kind} on the {self.sea.lower()} sea"
        return f"the {self.kind} whose capital is {self.capital.lower()}"


def _same_kind_values(key: str, values: dict, neighbour: dict) -> list:
    """Values on the page of the kind `key` asks for but not its own: the neighbour's, another attribute's."""
    kind = ATTRIBUTES[key][0]
    own = [v for k, v in values.items() if k != key and ATTRIBUTES[k][0] == kind]
    return own + ([neighbour[key]] if key in neighbour else [])


def _shaped_question(rng, names: Names, reading: _ShapedReading, answer_type: str, stated: list, topics: list,
                     values: dict, neighbour: dict):
    """The asked key and the question (nq_pages.reading_question); a NO question names a value stated
    elsewhere on the page (SHAPED_NO_VALUE_ON_PAGE), forcing the neighbour's copy onto the page if that is the
    value it names; else a value the page never states."""
    def no_value(asked: str) -> str:
        if rng.random() >= SHAPED_NO_VALUE_ON_PAGE:
            return values[asked]  # the true one: reading_question draws another of the kind
        while neighbour.get(asked, values[asked]) == values[asked]:  # commodities repeat: not the true one
            neighbour[asked] = names.value(ATTRIBUTES[asked][0])
        return rng.choice([x for x in _same_kind_values(asked, values, neighbour) if x != values[asked]])

    return reading_question(rng, names, reading, answer_type, stated, topics, values, no_value)


def _where_stated(rng, stated: list, asked: str) -> dict:
    """{key: "intro" | "infobox" | "body"} for each stated fact; the asked one by its own shares."""
    out, in_intro = {}, 0
    for k in stated:
        r = rng.random()
        if k == asked:
            at = "intro" if r < SHAPED_ASKED_IN_INTRO else "infobox" if r < SHAPED_ASKED_IN_INTRO + SHAPED_ASKED_IN_INFOBOX \
                else "body"
        else:
            at = "intro" if r < SHAPED_FACT_IN_INTRO else "infobox" if r < SHAPED_FACT_IN_INTRO + SHAPED_FACT_IN_INFOBOX \
                else "body"
        if at == "intro" and in_intro == SHAPED_INTRO_FACTS:
            at = "body"
        in_intro += at == "intro"
        out[k] = at
    return out


def _fact_row(reading: Reading, key: str, value: str, answer_key):
    """An infobox row stating `key`: its label (the infobox's, or one of its noun phrases) and its value."""
    label = reading.rng.choice((ATTRIBUTES[key][1], READING_ATTRIBUTES[key][1][0].capitalize())).split()
    vals = value.split()
    return ("Tr", [("Th", [(label, None, 0, 0)]), ("Td", [(vals, answer_key, 0, len(vals))])])


def _head(rng, page: NQPage, reading: Reading, kind: str, values: dict, where: dict, top_nav: int) -> list:
    """Title and navigation, the infobox (before or after the lead) and the lead paragraph stating the page's
    main facts."""
    entity = page.doc.entity
    title = title_and_nav(rng, page, kind)
    rows = infobox_rows(rng, entity, reading)
    rows += [_fact_row(reading, k, values[k], k) for k, at in where.items() if at == "infobox"]
    lead = (f"{entity} , officially the {reading.official} ( {reading.abbreviation} ) , is a {rng.choice(_SIZES)} {kind} "
            f"{rng.choice(_LIES)} the {reading.sea} Sea .").split()
    core = [(lead, None, 0, 0)] + [reading.fact(k, entity, values[k], k) for k, at in where.items() if at == "intro"]
    intro = page.paragraph(page.para_words(), core, first=True)
    if rng.random() < SHAPED_INFOBOX_FIRST:
        return [title, ("Table", rows), page.text(top_nav, "nav"), intro]
    return [title, page.text(top_nav, "nav"), intro, ("Table", rows)]


def _fact_block(page: NQPage, reading: Reading, key: str, value: str):
    """nq_pages.reading_fact_block, a topic's paragraph holding at most SHAPED_TOPIC_SENTENCES of its fixed
    sentences (the rest of it composed filler)."""
    rng = page.rng
    if not key.startswith("topic:"):
        return reading_fact_block(page, reading, key, value, rng.random())
    about = TOPICS[key[6:]][3]
    sents = [reading.topic(key[6:], page.doc.entity, key)]
    sents += [(x.split(), None, 0, 0) for x in rng.sample(about, rng.randint(1, min(SHAPED_TOPIC_SENTENCES, len(about))))]
    return page.paragraph(page.para_words(), sents, first=True)  # a section opens with its topic


def _shaped_body(rng, page: NQPage, reading: Reading, body_keys: list, values: dict, topics: list, asked: str,
                 neighbour: dict, words: int):
    """Sections of about `words` words with the body's facts, topics and the neighbour's copies (as
    nq_pages._reading_body places them), and apart from them the asked fact's nodes (a heading and its
    block; empty when the asked fact is not in the body)."""
    doc = page.doc
    own, asked_nodes = [], []
    for k in body_keys + ["topic:" + t for t in topics]:
        block = _fact_block(page, reading, k, values.get(k, ""))
        if k.startswith("topic:"):
            nodes = [("H2", TOPICS[k[6:]][0].split()), block]
        elif rng.random() < NQ_FACT_HEADING:
            nodes = [("H2", reading.noun(READING_ATTRIBUTES[k][1]).capitalize().split()), block]
        else:
            nodes = [block]
        if k == asked:
            asked_nodes = nodes
        else:
            own.append(nodes)
    specials = [ns[0] for ns in own if len(ns) == 1]
    headed = [ns for ns in own if len(ns) == 2]
    for k in list(values) + ([asked] if asked in ATTRIBUTES and asked not in values else []):
        if k in neighbour or rng.random() < (0.8 if k == asked else NQ_DISTRACTOR):
            fact = reading.fact(k, doc.neighbour, neighbour.get(k) or page.names.value(ATTRIBUTES[k][0]))
            specials.append(page.paragraph(page.para_words(), [fact]))
    for t in topics + ([asked[6:]] if asked.startswith("topic:") and asked[6:] not in topics else []):
        if rng.random() < (0.8 if "topic:" + t == asked else NQ_DISTRACTOR):
            specials.append(page.paragraph(page.para_words(), [reading.topic(t, doc.neighbour)], first=True))
    used = sum(nq_words(n) for ns in headed + [asked_nodes] for n in ns)
    nodes = nq_sections(rng, page, specials, [], max(0, words - used))
    for ns in headed:  # before a random section's heading, or at the end
        starts = [i for i, n in enumerate(nodes) if n[0] == "H2"] + [len(nodes)]
        at = rng.choice(starts)
        nodes[at:at] = ns
    return nodes, asked_nodes


def _body_rank(rng, num_candidates: int) -> int:
    """How many top-level candidates precede a fact stated in the body: in the page's first tenth
    SHAPED_BODY_TOP_TENTH of the time, else further down, nearer the top more often (as real NQ's)."""
    f = rng.uniform(0, 0.1) if rng.random() < SHAPED_BODY_TOP_TENTH else 0.1 + 0.9 * rng.random() ** 2
    return int(f * (num_candidates + 1))


def _insert_at_rank(nodes: list, inserted: list, rank: int, first: int) -> None:
    """Insert `inserted` after the `rank`-th top-level candidate of `nodes`, never before index `first`."""
    seen, at = 0, first
    for i, n in enumerate(nodes):
        if seen >= rank and i >= first:
            break
        if n[0].split("_")[0] in NQ_CANDIDATE_TAGS:
            seen += 1
        at = i + 1
    nodes[max(at, first):max(at, first)] = inserted


def make_nq_shaped_example(rng: random.Random, answer_type: str, min_words: int, max_words: int,
                           held_out: bool = False) -> dict:
    """One page of the `nq-shaped` profile (the module's docstring says what it changes from `nq`);
    `held_out`: a dev or test page, asked and stated in the `nq` profile's held-out forms at its rates."""
    names, doc, reading, target, stated, topics, values = reading_page_plan(rng, _ShapedDoc, _ShapedReading,
                                                                              min_words, max_words, held_out)
    entity, kind = doc.entity, reading.kind
    neighbour: dict = {}  # the neighbour's values a NO question names, so its copy is stated on the page
    asked, question = _shaped_question(rng, names, reading, answer_type, stated, topics, values, neighbour)
    where = _where_stated(rng, stated, asked)
    page = _ShapedPage(rng, doc)
    top_nav, refs, bottom_nav = (round(target * rng.uniform(*r)) for r in ((0.02, 0.08), (0.17, 0.38), (0.03, 0.1)))
    head = _head(rng, page, reading, kind, values, where, top_nav)
    used = sum(nq_words(n) for n in head)
    body, asked_nodes = _shaped_body(rng, page, reading, [k for k in stated if where[k] == "body"], values, topics,
                                     asked, neighbour, max(0, target - used - refs - bottom_nav))
    nodes = head + body
    if asked_nodes:
        cands = sum(n[0].split("_")[0] in NQ_CANDIDATE_TAGS for n in nodes)
        _insert_at_rank(nodes, asked_nodes, _body_rank(rng, cands), len(head))
    tail = [("H2", ["References"]), page.text(refs, "refs"), ("H2", ["External", "links"]), page.text(bottom_nav, "nav")]
    record = page_record(rng, nodes + tail, asked, answer_type, question, entity)
    # Written into every line of the profile (corpus.generate_split), so a score can be split by it.
    record["question_form"] = "held_out" if reading.asked_held_out else "seen"
    return record
