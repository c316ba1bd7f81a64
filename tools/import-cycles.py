#!/usr/bin/env python3
"""Lists the import edges between a crate's modules and finds the circles.

An edge A -> B means production code in module A names an item of module B
through `use crate::...`, `use super::...` or a `crate::...` path in its code.
Test code (`#[cfg(test)]` items, `tests.rs` files) is left out: a test may use
anything. Re-exports are followed to the module that defines the item, so
`use crate::Error` counts as an edge to `error`, not to the crate root.

Two levels are checked: files (every module), and the crate's top-level
modules (`read`, `join`, `write`, `model`, ...; a file counts as its first path
component). A circle at either level is reported, with the edges that close it.

Usage: tools/import-cycles.py [--edges] [CRATE_SRC_DIR]   (default crates/merge/src)
Exits 1 when there is a circle, so CI can run it as a check.
"""

import os
import re
import sys


def module_of(src, path):
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("lib", "main", "mod"):
        rel = rel[:-1]
    return tuple(rel)


RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(?:\\[^']+|[^\\'])'")


def strip_comments(text):
    """Drops comments and empties string and char literals (they may hold
    `crate::`, braces or quotes)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := RAW.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            out.append('""')
            i = (n if end < 0 else end) + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (m := CHAR.match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_block(text, i):
    """Index just past the item that starts at `i` (a `;` or a `{...}` block)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def strip_test_items(text):
    """Drops every item marked `#[cfg(test)]`; returns the text and the
    names of test-only child modules declared as `mod x;`."""
    out, test_mods, i = [], set(), 0
    pat = re.compile(r"#\[cfg\(test\)\]")
    while True:
        m = pat.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        decl = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text[m.end() :])
        if decl:
            test_mods.add(decl.group(1))
        i = skip_block(text, m.end())
    return "".join(out), test_mods


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += c == "{"
        depth -= c == "}"
        cur += c
    parts.append(cur)
    paths = []
    for p in parts:
        if p:
            paths += expand_use_tree(prefix + p)
    return paths


def parse(src):
    files = {}
    test_files = set()
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                files[module_of(src, p)] = p
    texts = {}
    for mod, p in files.items():
        text, test_mods = strip_test_items(strip_comments(open(p).read()))
        texts[mod] = text
        for t in test_mods:
            test_files.add(mod + (t,))
    # A test module's children are test code too.
    for mod in list(files):
        if any(mod[: len(t)] == t for t in test_files):
            texts.pop(mod, None)
    return texts


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")


def absolute(mod, path):
    """A `use` path as a tuple from the crate root, or None for other crates."""
    parts = path.split("::")
    if parts[0] == "crate":
        return tuple(parts[1:])
    if parts[0] in ("super", "self"):
        base = list(mod)
        while parts and parts[0] in ("super", "self"):
            if parts.pop(0) == "super":
                base.pop()
        return tuple(base + parts)
    return None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_edges = "--edges" in sys.argv
    src = args[0] if args else "crates/merge/src"
    texts = parse(src)
    modules = set(texts)

    # Re-exports: (module, name) -> absolute path of what it names.
    reexports = {}
    uses = {}
    for mod, text in texts.items():
        found = []
        for m in USE.finditer(text):
            for leaf in expand_use_tree(m.group(2)):
                name = leaf.split("::")[-1]
                target = absolute(mod, leaf)
                if target is None and len(mod) == 0:
                    target = tuple(leaf.split("::"))  # `pub use read::x` in lib.rs
                elif target is None and leaf.split("::")[0] in {m_[len(mod)] for m_ in modules if len(m_) > len(mod) and m_[: len(mod)] == mod}:
                    target = mod + tuple(leaf.split("::"))
                if target is None:
                    continue
                if not m.group(1):
                    found.append(target)
                elif name not in ("*", "self"):
                    # Followed when another module names it, not an edge of its own.
                    reexports[mod + (name,)] = target
        # Paths written in code: `crate::a::b::item`.
        for m in re.finditer(r"(?<![\w:])crate((?:::\w+)+)", text):
            found.append(tuple(m.group(1).split("::")[1:]))
        uses[mod] = found

    def resolve(path, seen=()):
        """The module that defines what `path` names."""
        for i in range(len(path), 0, -1):
            head = path[:i]
            if head in reexports and head not in seen:
                return resolve(reexports[head] + path[i:], seen + (head,))
            if head in modules:
                return head
        return ()

    edges = {}
    for mod, found in uses.items():
        for path in found:
            target = resolve(path)
            if target == mod or mod[: len(target)] == target:
                continue  # itself or an ancestor that declares it
            edges.setdefault(mod, {}).setdefault(target, "::".join(("crate",) + path))

    def fmt(m):
        return "::".join(m) or "crate"

    failed = False
    for level, key in (("file", lambda m: m), ("top-level", lambda m: m[:1])):
        graph = {}
        for a, ts in edges.items():
            for b, why in ts.items():
                ka, kb = key(a), key(b)
                if ka != kb and ka and kb:
                    graph.setdefault(ka, {}).setdefault(kb, f"{fmt(a)} uses {why}")
        if show_edges:
            print(f"## {level} edges")
            for a in sorted(graph):
                for b in sorted(graph[a]):
                    print(f"{fmt(a)} -> {fmt(b)}    ({graph[a][b]})")
        cycles = elementary_cycles(graph)
        print(f"{level} level: {sum(len(v) for v in graph.values())} edges, {len(cycles)} circles")
        for c in cycles:
            failed = True
            print("  " + " -> ".join(fmt(m) for m in c + [c[0]]))
            for a, b in zip(c, c[1:] + [c[0]]):
                print(f"      {graph[a][b]}")
    sys.exit(1 if failed else 0)


def elementary_cycles(graph):
    """Every simple circle, each once (started at its smallest node)."""
    nodes = sorted(set(graph) | {b for v in graph.values() for b in v})
    cycles = []
    for start in nodes:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, {})):
                if nxt == start:
                    cycles.append(path)
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return cycles


if __name__ == "__main__":
    main()
