/*-------------------------------------------------------------------------
 *
 * schedule.c
 *		The expiry worker's schedule: which lease to look at when.  A
 *		red-black tree (PostgreSQL's lib/rbtree) of (deadline, name), so
 *		that both the earliest and the latest deadline are at hand, and a
 *		hash table by name, so that each lease is scheduled once, at its
 *		earliest known deadline.  Backend-local to the worker.
 *
 *		It holds at most "capacity" leases, the earliest ones: a lease
 *		due before the latest one pushes that one out.  Whatever is left out
 *		brings the horizon down to its deadline: every deadline before the
 *		horizon is in the schedule, deadlines at or after it may be missing,
 *		and the worker rereads the lease table once it is done with
 *		everything up to the horizon.
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
#include "lib/rbtree.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* A tree node: ordered by deadline, then name */
typedef struct ScheduleNode
{
	RBTNode		rbt;
	TimestampTz when;
	char	   *name;			/* shared with the hash entry */
} ScheduleNode;

/* A hash entry: the deadline a lease is scheduled at */
typedef struct ScheduleEntry
{
	char	   *name;			/* hash key: NUL-terminated, palloc'd */
	TimestampTz when;
} ScheduleEntry;

struct Schedule
{
	MemoryContext cxt;
	RBTree	   *tree;
	HTAB	   *entries;
	int			capacity;
	TimestampTz horizon;		/* DT_NOEND unless something was left out */
};

static int
node_compare(const RBTNode *a, const RBTNode *b, void *arg)
{
	const ScheduleNode *na = (const ScheduleNode *) a;
	const ScheduleNode *nb = (const ScheduleNode *) b;

	if (na->when != nb->when)
		return (na->when < nb->when) ? -1 : 1;
	return strcmp(na->name, nb->name);
}

/* Each lease has one node (the hash table sees to it): never called. */
static void
node_combine(RBTNode *existing, const RBTNode *newdata, void *arg)
{
	elog(ERROR, "hoplock schedule has lease \"%s\" twice",
		 ((const ScheduleNode *) newdata)->name);
}

static RBTNode *
node_alloc(void *arg)
{
	return MemoryContextAlloc((MemoryContext) arg, sizeof(ScheduleNode));
}

static void
node_free(RBTNode *node, void *arg)
{
	pfree(node);
}

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

/* (Re)build the empty tree and hash table in s->cxt. */
static void
schedule_init(Schedule *s)
{
	HASHCTL		ctl;
	MemoryContext old;

	/* rbt_create allocates the tree in the current context */
	old = MemoryContextSwitchTo(s->cxt);
	s->tree = rbt_create(sizeof(ScheduleNode), node_compare, node_combine,
						 node_alloc, node_free, s->cxt);
	MemoryContextSwitchTo(old);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(ScheduleEntry);
	ctl.hash = name_hash;
	ctl.match = name_match;
	ctl.keycopy = name_copy;
	ctl.hcxt = s->cxt;
	s->entries = hash_create("hoplock schedule by name", 1024, &ctl,
							 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							 HASH_KEYCOPY | HASH_CONTEXT);
	s->horizon = DT_NOEND;
}

/*
 * A schedule for "capacity" names, in a memory context of its own under
 * "parent".
 */
Schedule *
hl_schedule_create(MemoryContext parent, int capacity)
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
hl_schedule_reset(Schedule *s, int capacity)
{
	MemoryContextReset(s->cxt);
	s->capacity = capacity;
	schedule_init(s);
}

static void
tree_delete(Schedule *s, TimestampTz when, char *name)
{
	ScheduleNode probe;
	RBTNode    *node;

	probe.when = when;
	probe.name = name;
	node = rbt_find(s->tree, &probe.rbt);
	if (node == NULL)
		elog(ERROR, "hoplock schedule has no entry for lease \"%s\"", name);
	rbt_delete(s->tree, node);
}

/* Take a lease out of the schedule altogether. */
static void
remove_entry(Schedule *s, ScheduleEntry *entry)
{
	char	   *name = entry->name;

	tree_delete(s, entry->when, name);
	hash_search(s->entries, &name, HASH_REMOVE, NULL);
	pfree(name);
}

static void
insert_node(Schedule *s, TimestampTz when, char *name)
{
	ScheduleNode node;
	bool		isnew;

	node.when = when;
	node.name = name;
	rbt_insert(s->tree, &node.rbt, &isnew);
}

/*
 * Schedule lease "name" at "when", unless it is already scheduled earlier.
 * When the schedule is full, the latest lease makes room for an earlier
 * one; whichever is left out brings the horizon down to its deadline.
 */
void
hl_schedule_add(Schedule *s, const char *name, int namelen, TimestampTz when)
{
	char		key[HL_MAX_NAME_BYTES + 1];
	char	   *keyp = key;
	ScheduleEntry *entry;

	Assert(namelen <= HL_MAX_NAME_BYTES);
	if (when >= s->horizon)
		return;

	memcpy(key, name, namelen);
	key[namelen] = '\0';
	entry = hash_search(s->entries, &keyp, HASH_FIND, NULL);
	if (entry != NULL)
	{
		if (when < entry->when)
		{
			tree_delete(s, entry->when, entry->name);
			entry->when = when;
			insert_node(s, when, entry->name);
		}
		return;
	}

	if (hash_get_num_entries(s->entries) >= s->capacity)
	{
		RBTreeIterator iter;
		ScheduleNode *latest;
		char	   *latest_name;

		rbt_begin_iterate(s->tree, RightLeftWalk, &iter);
		latest = (ScheduleNode *) rbt_iterate(&iter);
		if (latest == NULL || when >= latest->when)
		{
			s->horizon = when;
			return;
		}
		s->horizon = latest->when;
		latest_name = latest->name;
		entry = hash_search(s->entries, &latest_name, HASH_FIND, NULL);
		remove_entry(s, entry);
	}

	keyp = MemoryContextStrdup(s->cxt, key);
	entry = hash_search(s->entries, &keyp, HASH_ENTER, NULL);
	entry->when = when;
	insert_node(s, when, keyp);
}

/* The earliest deadline in the schedule, and whether there is one. */
bool
hl_schedule_next(Schedule *s, TimestampTz *when)
{
	ScheduleNode *first = (ScheduleNode *) rbt_leftmost(s->tree);

	if (first == NULL)
		return false;
	*when = first->when;
	return true;
}

/*
 * Take the earliest entry due at "now": its name goes to "name" (room for
 * HL_MAX_NAME_BYTES + 1), and it leaves the schedule.
 */
bool
hl_schedule_take_due(Schedule *s, TimestampTz now, char *name, int *namelen,
				  TimestampTz *when)
{
	ScheduleNode *first = (ScheduleNode *) rbt_leftmost(s->tree);
	char	   *key;
	ScheduleEntry *entry;

	if (first == NULL || first->when > now)
		return false;

	*when = first->when;
	key = first->name;
	*namelen = strlen(key);
	memcpy(name, key, *namelen + 1);
	entry = hash_search(s->entries, &key, HASH_FIND, NULL);
	remove_entry(s, entry);
	return true;
}

/* How many names are due by "until", counted up to "max" at most. */
int
hl_schedule_count_due(Schedule *s, TimestampTz until, int max)
{
	RBTreeIterator iter;
	ScheduleNode *node;
	int			n = 0;

	rbt_begin_iterate(s->tree, LeftRightWalk, &iter);
	while (n < max && (node = (ScheduleNode *) rbt_iterate(&iter)) != NULL &&
		   node->when <= until)
		n++;
	return n;
}

/* How many names the schedule holds. */
int
hl_schedule_count(Schedule *s)
{
	return (int) hash_get_num_entries(s->entries);
}

/* DT_NOEND unless leases were left out: then reread the table by this time. */
TimestampTz
hl_schedule_horizon(Schedule *s)
{
	return s->horizon;
}

/*
 * The worker is about to read the whole table again: whatever it left out
 * so far it will find again, so forget the horizon.  Entries already in
 * the schedule stay (an entry is only a reminder to look).
 */
void
hl_schedule_reopen(Schedule *s)
{
	s->horizon = DT_NOEND;
}
