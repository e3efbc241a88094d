/*-------------------------------------------------------------------------
 *
 * schedule.c
 *		The expiry worker's schedule: which lease to look at when.  A
 *		binary min-heap of (deadline, entry) with lazy deletion, and a hash
 *		table by name so that each lease is scheduled once, at its earliest
 *		known deadline.  Backend-local to the worker.
 *
 *		It holds at most "capacity" leases.  Beyond that it keeps a
 *		horizon: every deadline before the horizon is in the schedule;
 *		deadlines after it may be missing (the schedule has overflowed),
 *		and the worker rescans the lease table when it reaches the horizon.
 *
 *		An entry is only a reminder to look: the worker reads the lease
 *		when its time comes, and schedules it again if it was renewed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "schedule.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

typedef struct ScheduleEntry
{
	char	   *name;			/* hash key: NUL-terminated, palloc'd */
	TimestampTz when;			/* the deadline it is scheduled at */
	uint64		seq;			/* of its live heap node; 0 once removed */
} ScheduleEntry;

/*
 * A heap node is live while its entry still carries its sequence number.
 * Removed entries stay in dynahash's free list, never freed before the
 * whole schedule is, so reading a stale node's entry is safe.
 */
typedef struct HeapNode
{
	TimestampTz when;
	uint64		seq;
	ScheduleEntry *entry;
} HeapNode;

struct Schedule
{
	MemoryContext cxt;
	HTAB	   *entries;
	HeapNode   *heap;
	int			nheap;
	int			heap_size;
	int			capacity;
	uint64		next_seq;
	TimestampTz horizon;		/* DT_NOEND unless overflowed */
};

static uint32
name_hash(const void *key, Size keysize)
{
	const char *name = *(char *const *) key;

	return hash_bytes((const unsigned char *) name, strlen(name));
}

static int
name_match(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(char *const *) key1, *(char *const *) key2);
}

static void *
name_copy(void *dest, const void *src, Size keysize)
{
	/* the caller allocates the name; the key is the pointer */
	*(char **) dest = *(char *const *) src;
	return dest;
}

/* (Re)build the empty hash table and heap in s->cxt. */
static void
schedule_init(Schedule *s)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(ScheduleEntry);
	ctl.hash = name_hash;
	ctl.match = name_match;
	ctl.keycopy = name_copy;
	ctl.hcxt = s->cxt;
	s->entries = hash_create("hoplock schedule", 1024, &ctl,
							 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							 HASH_KEYCOPY | HASH_CONTEXT);
	s->heap_size = 1024;
	s->heap = MemoryContextAlloc(s->cxt, s->heap_size * sizeof(HeapNode));
	s->nheap = 0;
	s->horizon = DT_NOEND;
}

Schedule *
schedule_create(MemoryContext parent, int capacity)
{
	Schedule   *s = MemoryContextAllocZero(parent, sizeof(Schedule));

	s->cxt = AllocSetContextCreate(parent, "hoplock schedule",
								   ALLOCSET_DEFAULT_SIZES);
	s->capacity = capacity;
	schedule_init(s);
	return s;
}

/* Forget everything, and take a new capacity; the worker will rescan. */
void
schedule_reset(Schedule *s, int capacity)
{
	MemoryContextReset(s->cxt);
	s->capacity = capacity;
	schedule_init(s);
}

static void
sift_up(Schedule *s, int i)
{
	HeapNode	node = s->heap[i];

	while (i > 0)
	{
		int			parent = (i - 1) / 2;

		if (s->heap[parent].when <= node.when)
			break;
		s->heap[i] = s->heap[parent];
		i = parent;
	}
	s->heap[i] = node;
}

static void
sift_down(Schedule *s, int i)
{
	HeapNode	node = s->heap[i];

	for (;;)
	{
		int			child = 2 * i + 1;

		if (child >= s->nheap)
			break;
		if (child + 1 < s->nheap && s->heap[child + 1].when < s->heap[child].when)
			child++;
		if (node.when <= s->heap[child].when)
			break;
		s->heap[i] = s->heap[child];
		i = child;
	}
	s->heap[i] = node;
}

static void
heap_push(Schedule *s, TimestampTz when, ScheduleEntry *entry)
{
	if (s->nheap == s->heap_size)
	{
		s->heap_size *= 2;
		s->heap = repalloc(s->heap, s->heap_size * sizeof(HeapNode));
	}
	entry->when = when;
	entry->seq = ++s->next_seq;
	s->heap[s->nheap].when = when;
	s->heap[s->nheap].seq = entry->seq;
	s->heap[s->nheap].entry = entry;
	sift_up(s, s->nheap++);
}

static void
heap_pop(Schedule *s)
{
	s->heap[0] = s->heap[--s->nheap];
	if (s->nheap > 0)
		sift_down(s, 0);
}

/* Drop stale nodes from the top of the heap. */
static void
heap_clean_top(Schedule *s)
{
	while (s->nheap > 0 && s->heap[0].entry->seq != s->heap[0].seq)
		heap_pop(s);
}

/*
 * Schedule lease "name" at "when", unless it is already scheduled earlier.
 * Beyond the capacity or the horizon it is left out, and the horizon comes
 * down to it: the worker must rescan before then.
 */
void
schedule_add(Schedule *s, const char *name, int namelen, TimestampTz when)
{
	char		key[HOPLOCK_MAX_NAME_BYTES + 1];
	char	   *keyp = key;
	ScheduleEntry *entry;
	bool		found;

	if (when >= s->horizon)
		return;

	memcpy(key, name, namelen);
	key[namelen] = '\0';
	entry = hash_search(s->entries, &keyp, HASH_FIND, NULL);
	if (entry != NULL)
	{
		if (when < entry->when)
			heap_push(s, when, entry);
		return;
	}

	if (hash_get_num_entries(s->entries) >= s->capacity)
	{
		s->horizon = when;
		return;
	}

	keyp = MemoryContextStrdup(s->cxt, key);
	entry = hash_search(s->entries, &keyp, HASH_ENTER, &found);
	heap_push(s, when, entry);
}

/*
 * The earliest deadline in the schedule, and whether there is one.
 */
bool
schedule_next(Schedule *s, TimestampTz *when)
{
	heap_clean_top(s);
	if (s->nheap == 0)
		return false;
	*when = s->heap[0].when;
	return true;
}

/*
 * Take the earliest entry due at "now": its name goes to "name" (room for
 * HOPLOCK_MAX_NAME_BYTES + 1), and it leaves the schedule.
 */
bool
schedule_take_due(Schedule *s, TimestampTz now, char *name, int *namelen,
				  TimestampTz *when)
{
	ScheduleEntry *entry;
	char	   *key;

	heap_clean_top(s);
	if (s->nheap == 0 || s->heap[0].when > now)
		return false;

	entry = s->heap[0].entry;
	*when = s->heap[0].when;
	heap_pop(s);

	key = entry->name;
	*namelen = strlen(key);
	memcpy(name, key, *namelen + 1);
	entry->seq = 0;
	hash_search(s->entries, &key, HASH_REMOVE, NULL);
	pfree(key);
	return true;
}

int
schedule_count(Schedule *s)
{
	return (int) hash_get_num_entries(s->entries);
}

/* DT_NOEND unless leases were left out: then rescan by this time. */
TimestampTz
schedule_horizon(Schedule *s)
{
	return s->horizon;
}

/* Leave out every deadline from "horizon" on (after a partial scan). */
void
schedule_set_horizon(Schedule *s, TimestampTz horizon)
{
	s->horizon = horizon;
}

void
schedule_set_capacity(Schedule *s, int capacity)
{
	s->capacity = capacity;
}
