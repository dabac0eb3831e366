#!/usr/bin/env python3
"""The licences of the Rust crates linked into snowflake.so, for the packages (make package, make rpm).

    scripts/crate-licenses.py dep5 NN        DEP-5 paragraphs, one per crate, for the .deb's copyright
    scripts/crate-licenses.py files NN DIR   each crate's licence files copied into DIR/<crate>-<version>/
    scripts/crate-licenses.py spdx NN        the library's licence as one SPDX expression (the RPM's License)

The crates are those the library links for PostgreSQL NN: cargo metadata's resolved graph from
this workspace's `snowflake`, through normal dependencies only (not dev or build dependencies),
for this machine's target, without proc-macro crates (they run in the compiler; nothing of them
is linked). The workspace's own crates are this project's (LICENSE). Each crate's licence texts are
the files it ships beside its Cargo.toml in cargo's registry (license-file, LICENSE*, LICENCE*,
COPYING*, UNLICENSE*, COPYRIGHT*, NOTICE*, and those in a LICENSES/ directory); a crate that ships
none and says MIT gets the MIT text of LICENSE under its authors' names. In the DEP-5 form the
Apache License 2.0, when it is the standard text, is referred to /usr/share/common-licenses as
Debian's policy asks; every other text is there word for word.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LICENSE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|UNLICENSE|COPYRIGHT|NOTICE)", re.I)
DEBIAN_APACHE = "/usr/share/common-licenses/Apache-2.0"


def fail(msg):
    sys.exit(f"crate-licenses: {msg}")


def crates(major):
    """[(package, [licence file paths])] of every crate linked into the library, sorted."""
    host = next(
        line.split(": ", 1)[1]
        for line in subprocess.run(
            ["rustc", "-vV"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.startswith("host: ")
    )
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--quiet", "--format-version", "1", "--locked",
             "--filter-platform", host, "--no-default-features", "--features", f"pg{major}",
             "--manifest-path", os.path.join(ROOT, "Cargo.toml")],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    root = next(i for i in members if packages[i]["name"] == "snowflake")
    seen, todo = {root}, [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if not any(k["kind"] is None for k in dep["dep_kinds"]):
                continue  # a dev or build dependency only
            pkg = packages[dep["pkg"]]
            if all("proc-macro" in t["kind"] for t in pkg["targets"]):
                continue
            if dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    out = []
    for i in seen - members:
        pkg = packages[i]
        if not pkg.get("license"):
            fail(f"{pkg['name']} {pkg['version']} states no licence (Cargo.toml's license)")
        out.append((pkg, licence_files(pkg)))
    return sorted(out, key=lambda c: (c[0]["name"], c[0]["version"]))


def licence_files(pkg):
    d = os.path.dirname(pkg["manifest_path"])
    found = set()
    if pkg.get("license_file"):
        found.add(os.path.normpath(os.path.join(d, pkg["license_file"])))
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if not LICENSE_NAME.match(name):
            continue
        if os.path.isfile(p):
            found.add(p)
        elif os.path.isdir(p):
            found.update(os.path.join(p, f) for f in os.listdir(p) if os.path.isfile(os.path.join(p, f)))
    return sorted(found)


def spdx(expr):
    """Cargo's old "MIT/Apache-2.0" is "MIT OR Apache-2.0"."""
    return re.sub(r"\s*/\s*", " OR ", expr.strip())


def dep5_name(expr):
    """An SPDX expression in DEP-5's words: MIT is Expat, operators in lower case."""
    words = re.split(r"(\s+|[()])", spdx(expr))
    names = {"MIT": "Expat", "OR": "or", "AND": "and", "WITH": "with"}
    return "".join(names.get(w, w) for w in words)


def mit_text(holders):
    lines = open(os.path.join(ROOT, "LICENSE"), encoding="utf-8").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Permission is hereby granted"))
    return "\n".join([f"Copyright (c) {holders}", ""] + lines[start:]) + "\n"


def norm(text):
    """Words only: line breaks, indentation and the scheme of the licence's address do not count."""
    return " ".join(text.replace("https://", "http://").split())


def standard_apache(text):
    """The Apache License 2.0 as Debian ships it: its terms whole, and of its appendix (how to
    apply it) all, part or nothing. Lintian wants a reference to Debian's copy instead."""
    debian = norm(open(DEBIAN_APACHE, encoding="utf-8").read())
    end = debian.index("END OF TERMS AND CONDITIONS") + len("END OF TERMS AND CONDITIONS")
    text = norm(text)
    return len(text) >= end and debian.startswith(text)


def texts(pkg, files):
    """[(name, text)] of the crate's licence texts; a crate without files and with MIT gets MIT's."""
    out = [(os.path.relpath(f, os.path.dirname(pkg["manifest_path"])),
            open(f, encoding="utf-8", errors="replace").read()) for f in files]
    if not out:
        if not re.search(r"\bMIT\b", spdx(pkg["license"])):
            fail(f"{pkg['name']} {pkg['version']} ships no licence file and is not MIT ({pkg['license']})")
        holders = ", ".join(pkg.get("authors") or []) or f"the {pkg['name']} authors"
        out.append(("(none shipped: the MIT licence, as its Cargo.toml says)", mit_text(holders)))
    return out


def copyright_lines(pkg, items):
    """The copyright notices of the crate's own licence texts (not a standard Apache text's
    instructions or a template's placeholders), else its authors."""
    found = []
    for _, text in items:
        if standard_apache(text):
            continue
        for line in text.splitlines():
            m = re.match(r"^\s*Copyright\s+(?:\([cC]\)\s*|©\s*)?(\S.*\S)", line)
            if m and not re.search(r"[<\[](year|yyyy)|copyright (holder|owner)|notice", m.group(1), re.I):
                found.append(m.group(1))
    if not found:
        found = [", ".join(pkg.get("authors") or []) or f"the {pkg['name']} authors"]
    return list(dict.fromkeys(found))


def dep5(major):
    for pkg, files in crates(major):
        items = texts(pkg, files)
        name = f"{pkg['name']}-{pkg['version']}"
        print(f"Files: cargo-registry/{name}/*")
        holders = copyright_lines(pkg, items)
        print("Copyright: " + holders[0])
        for h in holders[1:]:
            print("           " + h)
        print(f"License: {dep5_name(pkg['license'])}")
        for file, text in items:
            print(f" ----- {name}: {file}")
            if standard_apache(text):
                print(" On Debian systems, the complete text of the Apache License 2.0 is in")
                print(f" {DEBIAN_APACHE}.")
                continue
            for line in text.rstrip("\n").splitlines():
                line = line.rstrip()
                print(" ." if not line.strip() else f" {line}")
        print()


def files(major, dest):
    for pkg, paths in crates(major):
        d = os.path.join(dest, f"{pkg['name']}-{pkg['version']}")
        os.makedirs(d, exist_ok=True)
        items = texts(pkg, paths)
        if not paths:
            items = [("LICENSE-MIT", items[0][1])]
        for name, text in items:
            target = os.path.join(d, name.replace("/", "-"))
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(target, 0o644)


def spdx_all(major):
    """snowflake's MIT and each crate's expression, once each ("A OR B" and "B OR A" are one)."""
    parts = {}
    for e in ["MIT"] + [spdx(p["license"]) for p, _ in crates(major)]:
        if re.fullmatch(r"[\w.+-]+( OR [\w.+-]+)+", e):
            e = " OR ".join(sorted(e.split(" OR "), key=lambda t: t != "MIT"))
        if " " in e:
            e = f"({e})"
        parts.setdefault(e, None)
    print(" AND ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("dep5", "files", "spdx"):
        sys.exit(__doc__)
    cmd, major = sys.argv[1], sys.argv[2]
    if cmd == "dep5":
        dep5(major)
    elif cmd == "files":
        files(major, sys.argv[3])
    else:
        spdx_all(major)
