#!/usr/bin/python3
# bcast_manifest.py DIR: one line per entry of the tree under DIR (never
# following a link), sorted by name: kind, mode, owner, size, link count,
# mtime (seconds), a link's target, a file's SHA-256, the group of names
# sharing its inode, and the name (bytes shown escaped).  Two trees are
# exact copies when their manifests are equal.  Used by t0016.
import hashlib
import os
import stat
import sys

root = os.fsencode(sys.argv[1])
entries, inodes = [], {}
for dirpath, dirs, files in os.walk(root):
    for n in dirs + files:
        p = os.path.join(dirpath, n)
        rel = os.path.relpath(p, root)
        st = os.lstat(p)
        entries.append((rel, p, st))
        if stat.S_ISREG(st.st_mode):
            inodes.setdefault(st.st_ino, []).append(rel)
st = os.lstat(root)
entries.append((b".", root, st))
for rel, p, st in sorted(entries):
    m = st.st_mode
    kind = "d" if stat.S_ISDIR(m) else "l" if stat.S_ISLNK(m) else "f" if stat.S_ISREG(m) else "?"
    extra = ""
    if kind == "l":
        extra = repr(os.readlink(p))
    elif kind == "f":
        with open(p, "rb") as f:
            extra = hashlib.sha256(f.read()).hexdigest()
        extra += " " + repr(sorted(inodes[st.st_ino]))
    size = st.st_size if kind == "f" else 0
    print(kind, oct(stat.S_IMODE(m)), st.st_uid, size, st.st_nlink if kind == "f" else "-",
          int(st.st_mtime), extra, repr(rel))
