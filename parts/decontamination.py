"""Which prompts a data recipe drops: exact duplicates and prompts that overlap a benchmark. Both
compare normalised words (words(): NFKC, lower case, runs of letters and digits). Prompt P overlaps
benchmark item B when they share a run of n words (n-grams as open-r1's decontaminate.py builds them):
    overlap(P, B) = exists i, j:  words(P)[i : i + n] == words(B)[j : j + n]
and an item shorter than n words overlaps when all its words appear in a row in P. Python only:
    prompts = PromptFilter(Decontaminator([("aime24", 3, "Find the number of ...")], n=8))
    prompts.keep("numina", "numina/17", text)  # False: a duplicate or an overlap (counted per source)
    prompts.report()                           # the counts, and which prompts matched which items
"""

import hashlib
import re
import unicodedata
from collections import Counter


class Decontaminator:
    """Which benchmark items a prompt overlaps: they share a run of n words (n-grams as open-r1's
    decontaminate.py builds them, on words normalised as words() does). An item shorter than n words
    matches when all its words appear in a row in the prompt (otherwise a short item could never
    match)."""

    def __init__(self, items: list, n: int = 8):
        """items: [(benchmark name, item id, text)]."""
        self.n = n
        self.ngrams = {}
        self.short = {}
        for bench, item, text in items:
            w = words(text)
            if len(w) < n:
                self.short.setdefault(len(w), {}).setdefault(tuple(w), set()).add((bench, item))
            for i in range(len(w) - n + 1):
                self.ngrams.setdefault(" ".join(w[i : i + n]), set()).add((bench, item))

    def matches(self, text: str, text_words: list | None = None) -> set:
        """The (benchmark, item) pairs `text` overlaps (text_words: its words(), if already
        computed)."""
        text_words = text_words if text_words is not None else words(text)
        hits = set()
        for i in range(len(text_words) - self.n + 1):
            found = self.ngrams.get(" ".join(text_words[i : i + self.n]))
            if found:
                hits |= found
        for length, table in self.short.items():  # items shorter than n words, matched whole
            for i in range(len(text_words) - length + 1) if length else ():
                found = table.get(tuple(text_words[i : i + length]))
                if found:
                    hits |= found
        return hits


class PromptFilter:
    """Keeps a prompt unless its normalised text was seen before (an exact duplicate) or it overlaps
    a benchmark item; counts both per source and remembers which benchmark items matched which
    prompts."""

    def __init__(self, decontaminator: Decontaminator | None):
        self.decontaminator = decontaminator
        self.seen = set()
        self.hits = {}
        self.counts = {}

    def keep(self, source: str, key: str, text: str) -> bool:
        counts = self.counts.setdefault(source, Counter(read=0))
        counts["read"] += 1
        w = words(text)
        digest = hashlib.blake2b(" ".join(w).encode(), digest_size=16).digest()
        if digest in self.seen:
            counts["duplicates"] += 1
            return False
        self.seen.add(digest)
        matched = self.decontaminator.matches(text, w) if self.decontaminator else set()
        for item in matched:
            self.hits.setdefault(item, []).append(key)
        if matched:
            counts["contaminated"] += 1
            return False
        counts["kept"] += 1
        return True

    def report(self) -> dict:
        hits = [
            dict(benchmark=b, item=i, prompts=len(keys), examples=keys[:5])
            for (b, i), keys in sorted(self.hits.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
        ]
        return dict(
            sources={s: dict(c) for s, c in self.counts.items()},
            benchmark_items_matched=len(hits),
            hits=hits,
        )


def words(text: str) -> list:
    """The words of a text after normalisation: NFKC, lower case, runs of letters and digits (so
    punctuation, spacing and line breaks do not matter)."""
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text).lower())
