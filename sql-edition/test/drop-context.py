#!/usr/bin/env python3
"""drop-context.py: filter psql's output for the SQL edition's regression run.

An error raised inside the SQL edition's PL/pgSQL functions carries CONTEXT
lines naming them ("PL/pgSQL function hoplock_internal.check_text(...) line
7 at RAISE", and the SQL statement each ran); the C edition's errors carry
none.  This drops exactly those lines from each CONTEXT block, and keeps
every other line (the context of the tests' own functions) as it was.  The
README's differences table lists it.
"""
import re
import sys

HOPLOCK_FN = re.compile(r'^(PL/pgSQL function ([A-Za-z_][A-Za-z0-9_]*\.)?hoplock_|'
                        r'PL/pgSQL function hoplock_internal\.|'
                        r'SQL function "hoplock_)')
FN = re.compile(r'^(PL/pgSQL function |SQL function |compilation of PL/pgSQL function )')


def flush(entries, out):
    """entries: list of (kind, lines); kind 'fn' or 'stmt'."""
    kept = []
    for i, (kind, lines) in enumerate(entries):
        if kind == 'fn':
            if HOPLOCK_FN.match(lines[0]):
                continue
        else:
            nxt = next((e for e in entries[i + 1:] if e[0] == 'fn'), None)
            if nxt is not None and HOPLOCK_FN.match(nxt[1][0]):
                continue
        kept.extend(lines)
    if kept:
        out.write('CONTEXT:  ' + kept[0])
        out.writelines(kept[1:])


def main():
    out = sys.stdout
    entries = None
    open_stmt = None
    for line in sys.stdin:
        if open_stmt is not None:
            open_stmt.append(line)
            if line.rstrip('\n').endswith('"'):
                open_stmt = None
            continue
        if entries is not None:
            body = line
        elif line.startswith('CONTEXT:  '):
            entries = []
            body = line[len('CONTEXT:  '):]
        else:
            out.write(line)
            continue
        if body.startswith('SQL statement "'):
            lines = [body]
            entries.append(('stmt', lines))
            if not body.rstrip('\n').endswith('"') or body.rstrip('\n') == 'SQL statement "':
                open_stmt = lines
            continue
        if FN.match(body):
            entries.append(('fn', [body]))
            continue
        flush(entries, out)
        entries = None
        out.write(line)
    if entries is not None:
        flush(entries, out)


main()
