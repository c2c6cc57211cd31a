#!/usr/bin/env bash
# Lists every pair of Rust files in the workspace that import each other and exits 1 if
# there is any: two files that need each other are one idea split in two (or two ideas
# tangled), and the lower layer can no longer be read or tested on its own.
#
# A file "imports" another when it names an item of the other's module by a
# `crate::`, `super::` or `self::` path (in a `use` or inline). A module declaration
# (`mod x;`) is not an import: a parent may declare its children while they use it.
# Nor is a re-export of a module's own descendant (`pub use child::Item;`, also
# `pub(crate) use`): that is how Rust lets a module expose an item defined in one of
# its files under the module's name, and it does not make the parent's code depend on
# the child's. A re-exported name the parent's own code also uses still counts.
# Files are found by following `mod` declarations from each crate root (lib.rs, main.rs,
# bin/, tests/, benches/, examples/); paths are resolved to the deepest existing module.
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'PY'
import os
import re
import sys

ROOT = os.getcwd()
SKIP = {"target", ".git", "node_modules"}

def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # String literals can hold `crate::` in messages; blank them before stripping `//`.
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # Brace characters would confuse the search for inline modules' ends.
    text = re.sub(r"'[{}]'", "''", text)
    return re.sub(r"//[^\n]*", "", text)

def crate_roots():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP and not d.startswith(".")]
        if "Cargo.toml" not in filenames:
            continue
        for name in ("src/lib.rs", "src/main.rs"):
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                yield path
        for sub in ("src/bin", "tests", "benches", "examples"):
            folder = os.path.join(dirpath, sub)
            if not os.path.isdir(folder):
                continue
            for entry in sorted(os.listdir(folder)):
                path = os.path.join(folder, entry)
                if entry.endswith(".rs"):
                    yield path
                elif os.path.isfile(os.path.join(path, "main.rs")):
                    yield os.path.join(path, "main.rs")

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{", re.M)

def child_file(parent_file, is_dir_owner, name):
    base = os.path.dirname(parent_file)
    if not is_dir_owner:
        base = os.path.join(base, os.path.splitext(os.path.basename(parent_file))[0])
    for candidate in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None

# modules: (root, module path tuple) -> file; files: file -> (root, module path tuple)
modules, files = {}, {}

def walk(root, path, mod_path, is_dir_owner):
    modules[(root, mod_path)] = path
    files[path] = (root, mod_path)
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    for name in MOD_DECL.findall(text):
        child = child_file(path, is_dir_owner, name)
        if child and child not in files:
            walk(root, child, mod_path + (name,), child.endswith("mod.rs"))
    # Inline modules (`mod tests { ... }`) live in their parent's file.
    for name, _ in inline_modules(text):
        modules.setdefault((root, mod_path + (name,)), path)

def inline_modules(text):
    """(name, body) of each top-level `mod name { ... }` of a file."""
    found = []
    for m in INLINE_MOD.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        found.append((m.group(1), text[m.end():i - 1]))
    return found

for root in crate_roots():
    if root not in files:
        walk(root, root, (), True)

def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (segments as lists)."""
    # Renames (`x as y`) name the same module; drop them before removing whitespace.
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []
    def go(prefix, s):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i]); start = i + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0 and part.endswith("}"):
                head = [x for x in part[:brace].split("::") if x]
                go(prefix + head, part[brace + 1:-1])
            else:
                out.append(prefix + [x for x in part.split("::") if x])
    go([], tree)
    return out

USE = re.compile(r"\buse\s+([^;]+);")
# `pub use`, `pub(crate) use`, `pub(super) use`, `pub(in path) use`: a re-export.
REEXPORT = re.compile(r"\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]+);")

def references(text):
    """Every `crate::`/`super::`/`self::` path of a file, as (segment list, whether it
    is only re-exported) pairs."""
    refs = []
    reexports = REEXPORT.findall(text)
    text = REEXPORT.sub("", text)
    body = USE.sub("", text)
    for tree in reexports:
        # The names the re-export binds (`X as Y` binds Y), in the order of the paths.
        bound = [segs[-1] if segs else "" for segs in
                 expand_use(re.sub(r"(\w+)\s+as\s+(\w+)", r"\2", tree))]
        for segs, name in zip(expand_use(tree), bound):
            used_here = name != "*" and re.search(r"\b%s\b" % re.escape(name), body)
            refs.append((segs, not used_here))
    for tree in USE.findall(text):
        refs.extend((segs, False) for segs in expand_use(tree))
    for m in re.finditer(r"\b(crate|super|self)\s*::\s*(\w+(?:\s*::\s*\w+)*)", body):
        refs.append(([m.group(1)] + re.split(r"\s*::\s*", m.group(2)), False))
    return refs

def resolve(root, here, segs):
    """The file of the deepest module a path names, or None outside the crate."""
    if not segs:
        return None
    cur = list(here)
    i = 0
    if segs[0] == "crate":
        cur, i = [], 1
    elif segs[0] in ("super", "self"):
        while i < len(segs) and segs[i] in ("super", "self"):
            if segs[i] == "super":
                if not cur:
                    return None
                cur.pop()
            i += 1
    elif (root, tuple(cur) + (segs[0],)) in modules:
        pass  # `use child::Item`: a path relative to this module
    else:
        return None
    best = modules.get((root, tuple(cur)))
    for seg in segs[i:]:
        cur.append(seg)
        found = modules.get((root, tuple(cur)))
        if found is None:
            break
        best = found
    return best

edges = {}
for path, (root, mod_path) in files.items():
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    # Paths inside an inline module (`mod tests { use super::*; }`) start from it.
    scopes = [(mod_path + (name,), body) for name, body in inline_modules(text)]
    for _, body in scopes:
        text = text.replace(body, "")
    scopes.append((mod_path, text))
    targets = set()
    for scope, code in scopes:
        for segs, reexported in references(code):
            target = resolve(root, scope, segs)
            if not target or target == path:
                continue
            # A module re-exporting an item of one of its own descendants (see the top).
            if reexported and files[target][1][: len(scope)] == scope:
                continue
            targets.add(target)
    edges[path] = targets

def parent_and_child(a, b):
    """One module split over files: `x/mod.rs` or `x.rs` and a file of `x/`."""
    (root_a, mod_a), (root_b, mod_b) = files[a], files[b]
    return root_a == root_b and (mod_a == mod_b[:-1] or mod_b == mod_a[:-1])

# A module's own child files see its private items by design and it re-exports theirs:
# those pairs are one module split in files and are listed only with --strict.
strict = "--strict" in sys.argv[1:]
pairs = sorted(
    {
        tuple(sorted((a, b)))
        for a, targets in edges.items()
        for b in targets
        if a in edges.get(b, ()) and (strict or not parent_and_child(a, b))
    }
)
for a, b in pairs:
    print(f"{os.path.relpath(a, ROOT)} <-> {os.path.relpath(b, ROOT)}")
if pairs:
    print(f"{len(pairs)} pair(s) of files import each other", file=sys.stderr)
    sys.exit(1)
print("no two files import each other")
PY
