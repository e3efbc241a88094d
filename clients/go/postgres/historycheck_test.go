package postgres_test

// The history checker of the TestProcess* tests. Its input is what the
// elector processes printed (see childMain) and what the server recorded:
// hoplock_history's terms of the lease and the fenced rows of proc_writes.
// It finds:
//
//   - critical sections of different terms that overlap, by the local wall
//     clock (the processes run on this one machine) and by the server's
//     clock (the fenced reads and writes each term made);
//   - a generation begun twice, or generations that do not rise in the
//     order the terms began (by the processes' log and by the server's
//     history), and terms that overlap in the server's history;
//   - a fenced row that does not belong to its term: written under a
//     generation its writer never held, committed before its term began,
//     after the next term began, or after its term was released; rows
//     whose generations go back in the order of their ids (drawn inside
//     the fenced transactions);
//   - a write with a lost term's generation that committed.
//
// The pure parts (historyViolations, serverViolations) need no server;
// TestHistoryCheckerFindsViolations feeds them bad histories.

import (
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// section is a term's critical section as its process saw it: from fn's
// start to the last time fn found its context live, by the local wall
// clock; and, by the server's clock, from the fenced read of the clock at
// fn's start (or its first fenced write) to its last fenced write.
type section struct {
	owner      string
	gen        int64
	from, to   time.Time // local wall clock
	sfrom, sto time.Time // the server's clock; zero if no fenced statement committed
	end        time.Time // when fn found its context done (local); zero if it never did
	cause      string    // what LossCause said then: held, gone, expired, none, other
	stale      []string  // outcomes of writes made after the loss
}

func (s *section) server(at time.Time) {
	if s.sfrom.IsZero() || at.Before(s.sfrom) {
		s.sfrom = at
	}
	if at.After(s.sto) {
		s.sto = at
	}
}

// sections reads the children's output: one section per term begun (a
// generation begun twice yields two sections).
func sections(children ...*child) []section {
	var out []section
	for _, c := range children {
		idx := map[int64]int{}
		for _, line := range c.output() {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			gen, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "start" {
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				at := time.Unix(0, ns)
				idx[gen] = len(out)
				out = append(out, section{owner: c.owner, gen: gen, from: at, to: at})
				continue
			}
			i, ok := idx[gen]
			if !ok {
				continue
			}
			s := &out[i]
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			at := time.Unix(0, ns)
			switch f[0] {
			case "ok":
				if at.After(s.to) {
					s.to = at
				}
			case "clock":
				s.server(at)
			case "write":
				if len(f) >= 4 {
					sns, _ := strconv.ParseInt(f[3], 10, 64)
					s.server(time.Unix(0, sns))
				}
			case "end":
				s.end = at
				if len(f) >= 4 {
					s.cause = f[3]
				}
			case "stale":
				s.stale = append(s.stale, f[2])
			}
		}
	}
	return out
}

// overlap reports whether the closed intervals [a0, a1] and [b0, b1]
// share an instant.
func overlap(a0, a1, b0, b1 time.Time) bool {
	return !a1.Before(b0) && !b1.Before(a0)
}

// historyViolations is the checker's part about what the processes logged.
func historyViolations(secs []section) []string {
	var v []string
	for i, a := range secs {
		for j, b := range secs {
			if i >= j {
				continue
			}
			if a.gen == b.gen {
				v = append(v, fmt.Sprintf("generation %d began twice: by %s at %v and by %s at %v",
					a.gen, a.owner, a.from.Format(stamp), b.owner, b.from.Format(stamp)))
				continue
			}
			if overlap(a.from, a.to, b.from, b.to) {
				v = append(v, fmt.Sprintf("critical sections overlap by the local clock: %s generation %d %v..%v and %s generation %d %v..%v",
					a.owner, a.gen, a.from.Format(stamp), a.to.Format(stamp), b.owner, b.gen, b.from.Format(stamp), b.to.Format(stamp)))
			}
			if !a.sfrom.IsZero() && !b.sfrom.IsZero() && overlap(a.sfrom, a.sto, b.sfrom, b.sto) {
				v = append(v, fmt.Sprintf("critical sections overlap by the server's clock: %s generation %d %v..%v and %s generation %d %v..%v",
					a.owner, a.gen, a.sfrom.Format(stamp), a.sto.Format(stamp), b.owner, b.gen, b.sfrom.Format(stamp), b.sto.Format(stamp)))
			}
			first, second := a, b
			if b.from.Before(a.from) {
				first, second = b, a
			}
			if first.gen > second.gen {
				v = append(v, fmt.Sprintf("generation went down: %s began %d at %v, then %s began %d at %v",
					first.owner, first.gen, first.from.Format(stamp), second.owner, second.gen, second.from.Format(stamp)))
			}
		}
		// A write after the server said the term was over must fail. (One
		// after the local deadline alone may commit, as long as the
		// server's term runs: the fenced rows' check judges it.)
		for _, s := range a.stale {
			if s == "committed" && (a.cause == "held" || a.cause == "gone") {
				v = append(v, fmt.Sprintf("%s's write with generation %d committed after the server ended the term (%s)", a.owner, a.gen, a.cause))
			}
		}
	}
	return v
}

// serverTerm is a term of the lease in hoplock_history.
type serverTerm struct {
	owner    string
	gen      int64
	acquired time.Time
	ended    time.Time // zero while it runs
	how      string
}

// fencedRow is a committed row of proc_writes.
type fencedRow struct {
	id        int64
	owner     string
	gen       int64
	committed time.Time // its transaction's commit timestamp (or, without track_commit_timestamp, when it was inserted)
}

// lapsed says whether a term ended by lapsing: its ended_at is then the
// instant it lapsed, and a transaction fenced before that may still commit
// after it (no new term can begin meanwhile), so only the next term's
// beginning bounds its rows.
func lapsed(how string) bool { return how == "expired" || how == "taken over" }

// serverViolations is the checker's part about what the server recorded:
// its terms of the lease never overlap and their generations rise; the
// processes' terms are in it, under their owners; every fenced row
// committed inside its own term.
func serverViolations(terms []serverTerm, rows []fencedRow, secs []section) []string {
	var v []string
	sort.Slice(terms, func(i, j int) bool { return terms[i].gen < terms[j].gen })
	byGen := map[int64]int{}
	for i, t := range terms {
		byGen[t.gen] = i
		if i == 0 {
			continue
		}
		p := terms[i-1]
		switch {
		case p.ended.IsZero():
			v = append(v, fmt.Sprintf("server history: term %d of %s still runs, but term %d of %s began at %v",
				p.gen, p.owner, t.gen, t.owner, t.acquired.Format(stamp)))
		case t.acquired.Before(p.ended):
			v = append(v, fmt.Sprintf("server history: term %d of %s began at %v, before term %d of %s ended at %v",
				t.gen, t.owner, t.acquired.Format(stamp), p.gen, p.owner, p.ended.Format(stamp)))
		}
		if t.acquired.Before(p.acquired) {
			v = append(v, fmt.Sprintf("server history: generation %d began at %v, before generation %d at %v",
				t.gen, t.acquired.Format(stamp), p.gen, p.acquired.Format(stamp)))
		}
	}
	for _, s := range secs {
		i, ok := byGen[s.gen]
		if !ok {
			v = append(v, fmt.Sprintf("%s led generation %d, which the server's history does not have", s.owner, s.gen))
		} else if terms[i].owner != s.owner {
			v = append(v, fmt.Sprintf("%s led generation %d, which the server's history gives to %s", s.owner, s.gen, terms[i].owner))
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].id < rows[j].id })
	var hi *fencedRow
	for k := range rows {
		r := &rows[k]
		if hi != nil && r.gen < hi.gen {
			v = append(v, fmt.Sprintf("fenced row %d (%s, generation %d) came after row %d (%s, generation %d)",
				r.id, r.owner, r.gen, hi.id, hi.owner, hi.gen))
		}
		if hi == nil || r.gen > hi.gen {
			hi = r
		}
		row := fmt.Sprintf("fenced row %d of %s, generation %d, committed at %v", r.id, r.owner, r.gen, r.committed.Format(stamp))
		i, ok := byGen[r.gen]
		if !ok {
			v = append(v, row+": no such term in the server's history")
			continue
		}
		t := terms[i]
		if t.owner != r.owner {
			v = append(v, fmt.Sprintf("%s: the term was %s's", row, t.owner))
		}
		if r.committed.Before(t.acquired) {
			v = append(v, fmt.Sprintf("%s: before its term began at %v", row, t.acquired.Format(stamp)))
		}
		if i+1 < len(terms) && r.committed.After(terms[i+1].acquired) {
			v = append(v, fmt.Sprintf("%s: after the next term (%d, %s) began at %v",
				row, terms[i+1].gen, terms[i+1].owner, terms[i+1].acquired.Format(stamp)))
		}
		if !t.ended.IsZero() && !lapsed(t.how) && r.committed.After(t.ended) {
			v = append(v, fmt.Sprintf("%s: after its term ended (%s) at %v", row, t.how, t.ended.Format(stamp)))
		}
	}
	return v
}

// checkHistory checks the history of lease name: what the processes
// logged (secs) and what the server recorded.
func checkHistory(t *testing.T, name string, secs []section) {
	t.Helper()
	for _, v := range historyViolations(secs) {
		t.Error(v)
	}
	db := adminDB(t)
	var terms []serverTerm
	rows, err := db.Query(q(`SELECT owner, generation, acquired_at, ended_at, coalesce(how, '')
		FROM %s.hoplock_history WHERE name = $1`), name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var st serverTerm
		var ended sql.NullTime
		if err := rows.Scan(&st.owner, &st.gen, &st.acquired, &ended, &st.how); err != nil {
			t.Fatal(err)
		}
		st.ended = ended.Time
		terms = append(terms, st)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var commitTS bool
	if err := db.QueryRow(`SELECT current_setting('track_commit_timestamp')::boolean`).Scan(&commitTS); err != nil {
		t.Fatal(err)
	}
	committed := "at"
	if commitTS {
		committed = "pg_catalog.pg_xact_commit_timestamp(xmin)"
	} else {
		t.Log("track_commit_timestamp is off: fenced rows are checked by when they were inserted")
	}
	var fenced []fencedRow
	rows, err = db.Query(`SELECT id, owner, generation, `+committed+` FROM proc_writes WHERE name = $1`, name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r fencedRow
		if err := rows.Scan(&r.id, &r.owner, &r.gen, &r.committed); err != nil {
			t.Fatal(err)
		}
		fenced = append(fenced, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, v := range serverViolations(terms, fenced, secs) {
		t.Error(v)
	}
	if len(fenced) == 0 {
		t.Error("no fenced row was written: the history proves nothing")
	}
	begun := map[int64]bool{}
	for _, s := range secs {
		begun[s.gen] = true
	}
	var others []string
	for _, st := range terms {
		if !begun[st.gen] {
			others = append(others, fmt.Sprintf("%d (%s, %s)", st.gen, st.owner, st.how))
		}
	}
	t.Logf("history of %s: %d terms on the server, %d begun by the processes' fn, %d fenced rows; terms no fn ran in: %v",
		name, len(terms), len(secs), len(fenced), others)
}

// The checker itself: it reports what it should, and only that.
func TestHistoryCheckerFindsViolations(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	good := []section{
		{owner: "A", gen: 1, from: ms(0), to: ms(10), sfrom: ms(1), sto: ms(9), stale: []string{"55P03"}},
		{owner: "B", gen: 2, from: ms(11), to: ms(20), sfrom: ms(12), sto: ms(19)},
	}
	if v := historyViolations(good); len(v) != 0 {
		t.Errorf("a good history reported: %v", v)
	}
	for what, bad := range map[string][]section{
		"overlap":        {{owner: "A", gen: 1, from: ms(0), to: ms(12)}, {owner: "B", gen: 2, from: ms(11), to: ms(20)}},
		"server overlap": {{owner: "A", gen: 1, from: ms(0), to: ms(10), sfrom: ms(1), sto: ms(13)}, {owner: "B", gen: 2, from: ms(11), to: ms(20), sfrom: ms(12), sto: ms(19)}},
		"down":           {{owner: "A", gen: 2, from: ms(0), to: ms(10)}, {owner: "B", gen: 1, from: ms(11), to: ms(20)}},
		"twice":          {{owner: "A", gen: 1, from: ms(0), to: ms(10)}, {owner: "B", gen: 1, from: ms(11), to: ms(20)}},
		"stale ok":       {{owner: "A", gen: 1, from: ms(0), to: ms(10), cause: "held", stale: []string{"committed"}}, {owner: "B", gen: 2, from: ms(11), to: ms(20)}},
	} {
		if v := historyViolations(bad); len(v) == 0 {
			t.Errorf("%s: not reported", what)
		} else {
			t.Logf("%s: %v", what, v)
		}
	}

	terms := func() []serverTerm {
		return []serverTerm{
			{owner: "A", gen: 1, acquired: ms(0), ended: ms(10), how: "released"},
			{owner: "B", gen: 2, acquired: ms(11), ended: ms(30), how: "expired"},
			{owner: "A", gen: 3, acquired: ms(32), how: ""},
		}
	}
	goodRows := []fencedRow{
		{id: 1, owner: "A", gen: 1, committed: ms(5)},
		{id: 2, owner: "B", gen: 2, committed: ms(15)},
		{id: 3, owner: "B", gen: 2, committed: ms(31)}, // fenced before its term lapsed, committed before the next began
		{id: 4, owner: "A", gen: 3, committed: ms(40)},
	}
	if v := serverViolations(terms(), goodRows, good); len(v) != 0 {
		t.Errorf("a good server history reported: %v", v)
	}
	for what, bad := range map[string][]fencedRow{
		"after release":   {{id: 1, owner: "A", gen: 1, committed: ms(10).Add(time.Microsecond)}},
		"after next term": {{id: 1, owner: "B", gen: 2, committed: ms(33)}},
		"before its term": {{id: 1, owner: "B", gen: 2, committed: ms(10)}},
		"not its term":    {{id: 1, owner: "B", gen: 1, committed: ms(5)}},
		"no such term":    {{id: 1, owner: "B", gen: 7, committed: ms(5)}},
		"back in id":      {{id: 1, owner: "B", gen: 2, committed: ms(15)}, {id: 2, owner: "A", gen: 1, committed: ms(9)}},
	} {
		if v := serverViolations(terms(), bad, nil); len(v) == 0 {
			t.Errorf("%s: not reported", what)
		} else {
			t.Logf("%s: %v", what, v)
		}
	}
	overlapping := terms()
	overlapping[1].acquired = ms(9)
	if v := serverViolations(overlapping, nil, nil); len(v) == 0 {
		t.Error("overlapping terms on the server: not reported")
	}
	if v := serverViolations(terms(), nil, []section{{owner: "B", gen: 1}}); len(v) == 0 {
		t.Error("a process leading another owner's generation: not reported")
	}
}
