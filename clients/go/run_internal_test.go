package hoplock

import (
	"testing"
	"time"
)

// The queue keeps EventLeader in order with the Elector's own terms: none
// while a term of its own runs, none for a generation at or below one
// reported already (acquired or led), none once Run is ending.
func TestEventQueueOrdersLeaders(t *testing.T) {
	out := make(chan Event, 100)
	q := newEventQueue(out)
	other := func(gen int64) Lease { return Lease{State: State{Owner: "X", Generation: gen}} }
	type event struct {
		kind EventKind
		gen  int64
	}
	var want []event
	offer := func(gen int64, queued bool) {
		t.Helper()
		if got := q.offerLeader(other(gen)); got != queued {
			t.Errorf("offerLeader(%d) = %v, want %v", gen, got, queued)
		}
		if queued {
			want = append(want, event{EventLeader, gen})
		}
	}
	push := func(kind EventKind, gen int64) {
		q.push(Event{Kind: kind, Lease: Lease{State: State{Owner: "A", Generation: gen}}})
		want = append(want, event{kind, gen})
	}

	offer(3, true)
	offer(3, false) // the same term again
	offer(2, false) // an older one, read late
	push(EventAcquired, 5)
	if q.following() {
		t.Error("following() while leading")
	}
	offer(6, false) // while leading: not yet
	push(EventRenewed, 5)
	push(EventLost, 5)
	if !q.following() {
		t.Error("not following() after the term ended")
	}
	offer(4, false) // older than the term acquired
	offer(5, false)
	offer(6, true)
	offer(6, false)
	offer(8, true)
	push(EventAcquired, 7) // a term of its own, taken over by 8 before it was reported
	push(EventLost, 7)
	offer(7, false)
	offer(9, true)
	q.stopLeaders()
	offer(10, false)
	if q.following() {
		t.Error("following() after stopLeaders")
	}
	q.finish(time.Second)
	var got []Event
	for ev := range out {
		got = append(got, ev)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %v", len(got), len(want), got)
	}
	for i, ev := range got {
		if ev.Kind != want[i].kind || ev.Lease.Generation != want[i].gen {
			t.Errorf("event %d: %v %d, want %v %d", i, ev.Kind, ev.Lease.Generation, want[i].kind, want[i].gen)
		}
	}
	if EventLeader.String() != "leader" || EventLost != 3 || EventLeader != 4 {
		t.Errorf("EventLeader %q = %d, EventLost = %d", EventLeader, EventLeader, EventLost)
	}
}
