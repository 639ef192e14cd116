"""The docs hold up: every link and anchor resolves, every command shown names a module, script, config
file or make target that exists, the README stays a front page whose results rows read at a glance, the
answers pages state their benchmark records' figures as the records hold them, and no tracker number
stands in for an explanation. Pure file reading, no process started."""

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
OUTPUT_OPTIONS = {"--json", "--png", "--out", "--output", "--output_dir", "--scores-out", "-o"}  # made, not read
MODULE_LAUNCHERS = {"python", "python3", "torchrun", "deepspeed", "accelerate"}
INLINE_LAUNCHERS = MODULE_LAUNCHERS | {"pytest", "bash", "sbatch"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
REPO_DIRS = (".ci", "configs", "docs", "scripts", "solution", "submission", "tests")
# Our own tracker's numbers mean nothing to a reader: "issue", "PR" or "ticket" with a number, or a bare
# "#" and a number. A public reference names its project (owner/repo#N), so a "#" right after a name is allowed.
TRACKER = re.compile(r"\b(?:issues?|pr|pull request|ticket)\s*#?\s*\d+|(?<![\w/])#\d+\b", re.IGNORECASE)
TRACKED = ("solution", "submission", "scripts", "configs", "tests", "docs")
TEXT_SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".json", ".example", ".txt", ".toml"}


def prose_and_blocks(path: Path) -> tuple:
    """([(line number, line)] outside fenced code, [(language, [lines])] of the fenced blocks)."""
    prose, blocks, block = [], [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence and block is None:
            block = (fence.group(1).lower(), [])
        elif line.strip() == "```" and block is not None:
            blocks.append(block)
            block = None
        elif block is not None:
            block[1].append(line)
        else:
            prose.append((number, line))
    assert block is None, f"{path.name}: a fenced code block is never closed"
    return prose, blocks


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but hyphens dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set:
    """Every heading's anchor in a markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    seen, found = {}, set()
    for _, line in prose_and_blocks(path)[0]:
        match = HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def links(path: Path) -> list:
    """(line number, target) of every markdown link and image outside code."""
    return [(number, target) for number, line in prose_and_blocks(path)[0]
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line))]


def broken_links(path: Path) -> list:
    problems = []
    for number, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    return problems


def makefile_targets() -> set:
    return set(re.findall(r"^([\w.-]+)\s*:", (ROOT / "Makefile").read_text(), flags=re.M))


def module_problem(name: str):
    """Why `python -m name` would not start, or None."""
    top = name.split(".")[0]
    if top not in REPO_DIRS:
        return None if importlib.util.find_spec(top) else f"module {name} is not installed"
    base = ROOT.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return None if '__name__ == "__main__"' in base.with_suffix(".py").read_text() else \
            f"module {name} has no __main__ block"
    return None if (base / "__main__.py").is_file() else f"module {name} does not exist"


def path_problem(token: str):
    """Why a repository path named in a command does not exist, or None (globs must match something)."""
    token = token.split("=", 1)[-1] if token.startswith("--") else token
    if token.split("/")[0] not in REPO_DIRS or "/" not in token:
        return None
    matches = list(ROOT.glob(token)) if "*" in token else [ROOT / token] if (ROOT / token).exists() else []
    return None if matches else f"{token} does not exist"


def script_missing(token: str) -> bool:
    """A script named by its repository path that is not there. A bare name (`python run.py`) runs in a
    folder a command made, such as the Kaggle kernel's, so it is not looked for here."""
    return token.endswith((".py", ".sh")) and "/" in token and not (ROOT / token).is_file()


def shell_commands(path: Path) -> list:
    """Each command line of the page's shell blocks, continuation lines joined, comments dropped."""
    commands = []
    for language, lines in prose_and_blocks(path)[1]:
        if language not in SHELL_BLOCKS:
            continue
        joined = "\n".join(lines).replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.split(r"(?:^|\s)#\s", line, maxsplit=1)[0].strip()
            if line:
                commands.append(line)
    return commands


def inline_code(path: Path) -> list:
    """Every `inline code` span of the page's prose, spans broken across lines joined."""
    paragraphs = "\n".join(line for _, line in prose_and_blocks(path)[0]).split("\n\n")
    return [" ".join(span.split()) for text in paragraphs for span in re.findall(r"`([^`]+)`", text)]


def command_words(command: str) -> list:
    """The command's words, less an environment or `time` prefix (`OMP_NUM_THREADS=1 /usr/bin/time python ...`)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote in a shortened command
        words = command.split()
    while words and (re.match(r"[A-Z_]+=", words[0]) or words[0] in ("time", "/usr/bin/time")):
        words = words[1:]
    return words


def inline_commands(path: Path) -> list:
    """The inline spans that are commands: `python scripts/x.py ...`, `torchrun ...`, `make demo`."""
    found = []
    for span in inline_code(path):
        words = command_words(span)
        if words and (Path(words[0]).name in INLINE_LAUNCHERS or words[0] == "make" and len(words) == 2):
            found.append(span)
    return found


def command_problems(command: str) -> list:
    """What a command names that is not there: a module, a script, a config file, a make target."""
    words = command_words(command)
    if not words:
        return []
    program = Path(words[0]).name
    inputs = [w for i, w in enumerate(words) if i == 0 or words[i - 1] not in OUTPUT_OPTIONS]
    problems = [path_problem(w) for w in inputs]
    if program in MODULE_LAUNCHERS:  # the first -m / --module is the launcher's; a later one is not (pytest -m)
        flags = [i for i, w in enumerate(words[:-1]) if w in ("-m", "--module")]
        problems += [module_problem(words[flags[0] + 1])] if flags else []
    if program in MODULE_LAUNCHERS | {"bash", "sh", "sbatch"}:
        problems += [f"script {w} does not exist" for w in inputs if script_missing(w) and not path_problem(w)]
    if program == "make":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        problems += [f"make target {t} is not in the Makefile" for t in targets if t not in makefile_targets()]
    return [p for p in problems if p]


# --- (a) links ----------------------------------------------------------------------------------------

def test_github_slug_follows_githubs_rules():
    assert github_slug("Checkpoints, resuming, consolidation") == "checkpoints-resuming-consolidation"
    assert github_slug("The training loop's overhead") == "the-training-loops-overhead"
    assert github_slug("Distributed training: the strategy is configuration") == \
        "distributed-training-the-strategy-is-configuration"
    assert github_slug("`zero3_offload` and FSDP2") == "zero3_offload-and-fsdp2"


def test_repeated_headings_get_numbered_anchors(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n## The proof\n```\n# not a heading\n```\n## The proof\n## The proof\n")
    assert anchors(page) == {"top", "the-proof", "the-proof-1", "the-proof-2"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_and_anchor_resolves(page):
    assert broken_links(page) == []


# --- (b) commands ---------------------------------------------------------------------------------------

def test_command_check_names_what_is_missing():
    assert command_problems("python -m solution.no_such_stage --x 1")
    assert command_problems("python scripts/no_such_script.py")
    assert command_problems("torchrun --nproc_per_node 2 -m solution.train --config configs/train/none.yaml")
    assert command_problems("make no-such-target")
    assert command_problems("deepspeed --num_gpus 2 --module solution.train --deepspeed configs/ds/zero9.json")
    assert command_problems("accelerate launch --config_file configs/accelerate/zero3.yaml -m solution.trian")
    assert command_problems("bash lost/launch.sh")
    assert command_problems("OMP_NUM_THREADS=1 /usr/bin/time python -m solution.hard_negativs --model DIR")
    assert not command_problems("accelerate launch --config_file configs/accelerate/zero3.yaml -m solution.train")
    assert not command_problems('python -m pytest -q -m "not slow" tests')  # pytest's -m is a marker
    assert not command_problems("python scripts/benchmark_loop.py --json docs/benchmarks/new.json")  # an output


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_shown_names_what_exists(page):
    problems = [f"{page.name}: {cmd}\n    {p}" for cmd in shell_commands(page) for p in command_problems(cmd)]
    assert problems == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_inline_command_and_path_names_what_exists(page):
    """The same for commands written inline in the prose and tables, and for every repository path in `code`."""
    problems = [f"{page.name}: {cmd}\n    {p}" for cmd in inline_commands(page) for p in command_problems(cmd)]
    problems += [f"{page.name}: {p}" for span in inline_code(page) if " " not in span
                 for p in [path_problem(span.rstrip(".,;:"))] if p]
    assert problems == []


def test_the_pages_show_commands():
    """The command check is not vacuous: the README's blocks hold the demo, the real-data path and the launchers."""
    commands = shell_commands(ROOT / "README.md")
    assert any(c.startswith("make demo") for c in commands)
    assert any(c.startswith("torchrun") for c in commands)
    assert sum(c.startswith("python -m") for c in commands) >= 10


# --- (c) the README is a front page -----------------------------------------------------------------------

def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move the detail to a page under docs/"
    first = "\n".join(lines[:40])
    assert "make demo" in first and "make test" in first, "`make demo` and `make test` belong in the first 40 lines"


# --- (d) no tracker numbers ------------------------------------------------------------------------------

def tracked_files() -> list:
    files = [ROOT / "README.md"]
    for folder in TRACKED:
        files += [p for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return files


def test_tracker_pattern():
    assert TRACKER.search(f"the figures of issue {13}'s table")
    assert TRACKER.search(f"what made the difference (Issue #{14})")
    assert TRACKER.search(f"fixed in #{7}")
    assert not TRACKER.search(f"[pytorch/pytorch#{162338}](https://github.com/pytorch/pytorch/issues/{162338})")
    assert not TRACKER.search("the answer-extraction settings on hand-made logits")


def test_no_tracker_numbers_in_code_or_docs():
    hits = []
    for path in tracked_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if TRACKER.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == [], "say what is meant instead of a tracker number:\n" + "\n".join(hits)


# --- (e) the README's results and the answers pages' figures -------------------------------------------

README_CELL = 120  # characters: a results row reads at a glance, the detail is on the page it links to
# {record: the fewest paired differences of techniques it holds}: the nq-shaped record (answers.json) holds the
# references and the baselines alone, whose differences against the references are its figures.
ANSWERS_RECORDS = {"answers.json": 8, "answers-nq.json": 20, "answers-nq-lexical.json": 20}


def results_rows(text: str) -> list:
    """The cells of each row of the README's results table (the one headed `| what | result | read on |`)."""
    body = text[text.index("| what | result | read on |"):].split("\n\n")[0].splitlines()[2:]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in body]


def test_readme_results_rows_read_at_a_glance():
    """Each results row: a short figure and a link to the page that explains it."""
    rows = results_rows((ROOT / "README.md").read_text())
    assert len(rows) >= 10
    long = [f"{what}: {len(result)} characters" for what, result, _ in rows if len(result) > README_CELL]
    assert long == [], f"results cells over {README_CELL} characters; put the detail on the linked page"
    assert [what for what, _, where in rows if not LINK.search(where)] == [], "every results row links its page"


def test_results_rows_check_flags_a_long_cell():
    text = "| what | result | read on |\n|---|---|---|\n| demo | " + "0.9 " * 40 + "| [b](docs/b.md) |\n"
    assert len(results_rows(text)[0][1]) > README_CELL


def record_figures(record: str) -> tuple:
    """(the baselines' figures, the paired differences) of a landed answers record, written as the pages
    write them: each baseline's test micro-F1 with its interval and its differences from word matching and
    from the best no-training row (micro-F1, and long-row F1 where the record has it); every paired
    difference of a technique or an ensemble against its baseline or best member."""
    def paired(row, key):
        low, high = row[f"{key}_ci"]
        return f"{row[key]:+.3f} ({low:+.3f} to {high:+.3f})"
    baselines, differences = [], []
    for row in json.loads((ROOT / "docs" / "benchmarks" / record).read_text()):
        if row["technique"] == "baseline":
            low, high = row["test_f1_ci"]
            baselines += [f"{row['test_f1']:.3f} ({low:.3f}-{high:.3f})", paired(row, "lexical_delta")]
            baselines += [paired(row, key) for key in ("best_reference_delta", "best_long_reference_delta")
                          if row.get(key) is not None]
        differences += [paired(row, key) for key in ("dev_f1_delta", "test_f1_delta") if row.get(key) is not None]
    return baselines, differences


def page_words(*names: str) -> str:
    """The pages' text with every run of white space one space, so a figure broken across lines reads whole."""
    return " ".join(" ".join((ROOT / "docs" / name).read_text().split()) for name in names)


def test_the_record_page_states_the_first_pass_recall_the_record_holds():
    """Each first-pass row of the landed record (its recall at 8 windows with the interval) is on the record
    page as the record holds it; the landed record has them on the test pages and the real lines."""
    rows = [r for r in json.loads((ROOT / "docs" / "benchmarks" / "answers.json").read_text())
            if r["technique"] == "first_pass"]
    assert {r["split"] for r in rows} == {"test", "real_lines"}
    stated = page_words("answers-record.md")
    figures = [f"{r['recall_at_8']:.3f} ({r['recall_at_8_ci'][0]:.3f}-{r['recall_at_8_ci'][1]:.3f})" for r in rows]
    assert [f for f in figures if f not in stated] == []


@pytest.mark.parametrize("record", ANSWERS_RECORDS)
def test_the_answers_pages_state_their_records_figures(record):
    """Every figure of the record is stated as the record holds it, on the record page or the techniques
    page, and the baselines' also in answers.md's headline table: a figure edited by hand on a page fails."""
    baselines, differences = record_figures(record)
    assert len(baselines) >= 4 and len(differences) >= ANSWERS_RECORDS[record]
    stated = page_words("answers-record.md", "answers-techniques.md")
    assert [f for f in baselines + differences if f not in stated] == []
    assert [f for f in baselines if f not in page_words("answers.md")] == []
