"""A page made as a tree of nodes, rendered as NQ gives a page: its tokens (HTML tags among the words), its
long-answer candidates, and its answer, by the block that states the asked fact."""

import random

NQ_NESTED_GOLD = 0.3  # of facts in a list item or table row, the share whose gold long answer is that Li/Tr
NQ_CANDIDATE_TAGS = ("P", "Table", "Tr", "Ul", "Li")


def nq_words(node) -> int:
    """Non-HTML words of a node, a sentence or a plain-text run."""
    if isinstance(node[0], list):  # a sentence (tokens, key, start, end)
        return len(node[0])
    tag, body = node
    if tag in ("text", "H2"):
        return len(body)
    return sum(nq_words(k) for k in body)


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


def page_record(rng: random.Random, nodes: list, asked: str, answer_type: str, question: str, entity: str) -> dict:
    """The page rendered, and its answer: the block stating `asked` (its nested item or row as the gold on
    NQ_NESTED_GOLD of the facts that have one)."""
    tokens, cands, where = _nq_render(nodes)
    answer = None
    if answer_type != "NONE":
        top, inner, vs, ve = where[asked]
        nested = inner != top and rng.random() < NQ_NESTED_GOLD
        answer = {"candidate_index": inner if nested else top, "short": [(vs, ve)] if answer_type == "SHORT" else [],
                  "yes_no": answer_type if answer_type in ("YES", "NO") else "NONE"}
    return {"question": question, "tokens": tokens, "candidates": cands, "answer": answer, "entity": entity}
