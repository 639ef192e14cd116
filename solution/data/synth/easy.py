"""The easy profile, the demo's and the tests' corpus: made-up Wikipedia articles about fictional
countries, every stated attribute once, its question in the statement's words. Also the vocabulary the
other profiles share: attributes, topics, filler, names and the answer-type mix.
"""


import math
import random

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


class Names:
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


def make_sentence(template: str, entity: str, key=None, value: str = ""):
    """A sentence as (tokens, key, value_start, value_end); the value span is where {V} stood."""
    head, _, tail = template.format(E=entity, V="\0").partition("\0")
    head, tail, vals = head.split(), tail.split(), value.split()
    return (head + vals + tail, key, len(head), len(head) + len(vals))


class Doc:
    """One article's entity, cities and neighbour; makes its filler sentences and paragraphs."""

    def __init__(self, rng: random.Random, entity: str, names: Names):
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


def make_question(rng: random.Random, names: Names, entity: str, answer_type: str, stated: list, topics: list):
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


def _plan(rng: random.Random, doc: Doc, stated: list, values: dict, topics: list, target: int) -> list:
    """Sections of blocks: [head, infobox, intro], then topic and generic sections in random order."""
    entity, names = doc.entity, doc.names
    infobox, listed, blocks = [], [], []
    for a in stated:  # where each stated attribute lives: a paragraph mostly, else an infobox row or a list item
        r = rng.random()
        if r < 0.2:
            value = values[a].split()
            infobox.append([("Th", (ATTRIBUTES[a][1].split(), None, 0, 0)), ("Td", (value, a, 0, len(value)))])
        else:
            fact = make_sentence(rng.choice(ATTRIBUTES[a][2]), entity, a, values[a])
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
    intro = make_sentence(f"{{E}} is a small {kind} on the {names.proper()} Sea .", entity)
    body = []
    for t in topics:
        heading, openings, _, about = TOPICS[t]
        sents = [make_sentence(rng.choice(openings), entity, "topic:" + t)]
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


def _fit(rng: random.Random, doc: Doc, sections: list, asked: str, target: int) -> None:
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
    names = Names(rng)
    entity = names.proper() + rng.choice(("ia", "and", "ora", "en", "ar"))
    doc = Doc(rng, entity, names)
    # Log-uniform length; longer documents state more attributes and topics, as longer articles do.
    target = round(math.exp(rng.uniform(math.log(min_words), math.log(max_words))))
    stated = rng.sample(list(ATTRIBUTES), rng.randint(2, max(2, min(18, target // 110))))
    topics = rng.sample(list(TOPICS), rng.randint(1, max(1, min(10, target // 300))))
    values, asked, question = make_question(rng, names, entity, answer_type, stated, topics)
    sections = _plan(rng, doc, stated, values, topics, target)
    _fit(rng, doc, sections, asked, target)
    tokens, cands, where = _render(sections)
    answer = None
    if answer_type != "NONE":
        top, vs, ve = where[asked]
        answer = {"candidate_index": top, "short": [(vs, ve)] if answer_type == "SHORT" else [],
                  "yes_no": answer_type if answer_type in ("YES", "NO") else "NONE"}
    return {"question": question, "tokens": tokens, "candidates": cands, "answer": answer, "entity": entity}
