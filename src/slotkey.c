/*-------------------------------------------------------------------------
 *
 * slotkey.c
 *		The keys of a lease's slots, the row that records how many a name
 *		has, and reading a name's slot rows (see slotkey.h).  Reads only:
 *		the lease core writes the rows, slots.c decides which.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "slotkey.h"
#include "storage.h"

#include "utils/builtins.h"
#include "utils/snapmgr.h"

/* The key of slot "slot" (1..N) of lease "name" */
text *
hl_slot_key(text *name, int slot)
{
	char		suffix[8];
	int			len = VARSIZE_ANY_EXHDR(name);
	int			slen;
	text	   *key;

	slen = snprintf(suffix, sizeof(suffix), "%c%d", HL_SLOT_SEP, slot);
	key = (text *) palloc(VARHDRSZ + len + slen);
	SET_VARSIZE(key, VARHDRSZ + len + slen);
	memcpy(VARDATA(key), VARDATA_ANY(name), len);
	memcpy(VARDATA(key) + len, suffix, slen);
	return key;
}

/*
 * The name a row's key belongs to, and its slot (*slot, 0 if none): "key"
 * itself unless it is a slot's key.
 */
text *
hl_slot_base(text *key, int *slot)
{
	int			len = VARSIZE_ANY_EXHDR(key);
	int			base = hl_slot_split(VARDATA_ANY(key), len, slot);

	if (base == len)
		return key;
	return cstring_to_text_with_len(VARDATA_ANY(key), base);
}

/* A row's key as messages show it: the name, with its slot if any */
char *
hl_lease_display_name(text *key)
{
	int			slot;
	int			len = VARSIZE_ANY_EXHDR(key);
	int			base = hl_slot_split(VARDATA_ANY(key), len, &slot);

	if (base == len)
		return text_to_cstring(key);
	return psprintf("%.*s\" slot \"%d", base, VARDATA_ANY(key), slot);
}

/*
 * The number of slots a row records, if it is its name's marker (a
 * released row whose owner is U+001F and the number); 0 otherwise.
 */
int
hl_slot_marker(const Lease *lease)
{
	const char *p;
	int			len;
	int			n = 0;

	if (lease == NULL || lease->owner == NULL)
		return 0;
	p = VARDATA_ANY(lease->owner);
	len = VARSIZE_ANY_EXHDR(lease->owner);
	if (len < 2 || p[0] != HL_SLOT_SEP)
		return 0;
	for (int i = 1; i < len && i < 6; i++)
	{
		if (p[i] < '0' || p[i] > '9')
			return 0;
		n = n * 10 + (p[i] - '0');
	}
	return n;
}

/* The owner of a marker that records "slots" */
text *
hl_slot_marker_owner(int slots)
{
	char		buf[8];

	snprintf(buf, sizeof(buf), "%c%d", HL_SLOT_SEP, slots);
	return cstring_to_text(buf);
}

/* What hl_slot_rows() collects, row by row (take_row) */
typedef struct SlotRowsScan
{
	text	   *name;
	int			slots;
	Lease	   *rows;
	bool	   *found;
	Lease	   *base;
	bool	   *base_found;
	int			n;
} SlotRowsScan;

/*
 * The slot number a row's key gives, if it is the key hl_slot_key() makes
 * for a slot 1..slots of "name" (len bytes); 0 if it is not.
 */
static int
slot_of_key(const char *key, int klen, const char *name, int len, int slots)
{
	int			k = 0;

	if (klen < len + 2 || klen > len + 5 || key[len] != HL_SLOT_SEP ||
		key[len + 1] == '0' || memcmp(key, name, len) != 0)
		return 0;
	for (int i = len + 1; i < klen; i++)
	{
		if (key[i] < '0' || key[i] > '9')
			return 0;
		k = k * 10 + (key[i] - '0');
	}
	return k <= slots ? k : 0;
}

static void
take_row(Lease *lease, void *arg)
{
	SlotRowsScan *scan = (SlotRowsScan *) arg;
	const char *name = VARDATA_ANY(scan->name);
	int			len = VARSIZE_ANY_EXHDR(scan->name);
	const char *key = VARDATA_ANY(lease->name);
	int			klen = VARSIZE_ANY_EXHDR(lease->name);
	int			k;

	if (klen == len && memcmp(key, name, len) == 0)
	{
		if (scan->base != NULL)
		{
			*scan->base = *lease;
			*scan->base_found = true;
		}
	}
	else if ((k = slot_of_key(key, klen, name, len, scan->slots)) > 0)
	{
		scan->rows[k - 1] = *lease;
		scan->found[k - 1] = true;
		scan->n++;
	}
}

/*
 * Read the rows of the "slots" slots of lease "name", newest committed
 * versions: rows[k - 1] and found[k - 1] for slot k; and, if "base" is not
 * NULL, the row of the name itself (*base_found whether there is one).
 * Returns how many slot rows were found; -1, reading nothing, if the table
 * is locked by maintenance and "busy" is true (else that raises 55P03).
 *
 * The name's row and its slots' are the rows whose keys run from the name
 * up to the name followed by U+0020: a key between them would hold a
 * control character other than the separator, which no name does.  One
 * scan of that range reads them all.
 */
int
hl_slot_rows(text *name, int slots, Lease *rows, bool *found, Lease *base,
			 bool *base_found, bool busy)
{
	HlRelation	rel;
	Snapshot	snapshot;
	SlotRowsScan scan;
	int			len = VARSIZE_ANY_EXHDR(name);
	text	   *hi;

	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
	{
		if (busy)
			return -1;
		hl_table_busy_error(HL_REL_LEASE);
	}
	for (int k = 0; k < slots; k++)
		found[k] = false;
	if (base_found != NULL)
		*base_found = false;
	scan.name = name;
	scan.slots = slots;
	scan.rows = rows;
	scan.found = found;
	scan.base = base;
	scan.base_found = base_found;
	scan.n = 0;

	hi = (text *) palloc(VARHDRSZ + len + 1);
	SET_VARSIZE(hi, VARHDRSZ + len + 1);
	memcpy(VARDATA(hi), VARDATA_ANY(name), len);
	VARDATA(hi)[len] = ' ';

	snapshot = RegisterSnapshot(GetLatestSnapshot());
	hl_store_fetch_range(&rel, name, hi, snapshot, take_row, &scan);
	UnregisterSnapshot(snapshot);
	hl_close(&rel, false);
	pfree(hi);
	return scan.n;
}

/*
 * The key of the slot of lease "name", which has "slots" slots, whose term
 * is (or was last) "generation"; NULL if none of its slots has it.  Reads
 * the newest committed rows.
 */
text *
hl_slot_key_of_generation(text *name, int slots, int64 generation)
{
	Lease	   *rows;
	bool	   *found;
	text	   *key = NULL;

	rows = palloc(slots * sizeof(Lease));
	found = palloc(slots * sizeof(bool));
	(void) hl_slot_rows(name, slots, rows, found, NULL, NULL, false);
	for (int k = 1; k <= slots && key == NULL; k++)
	{
		if (found[k - 1] && rows[k - 1].generation == generation)
			key = hl_slot_key(name, k);
	}
	pfree(rows);
	pfree(found);
	return key;
}

/*
 * Raise 22023: a call gave lease "name", which is in use with "have"
 * slots, another number, "want" (1 if it gave none).
 */
void
hl_slots_mismatch(text *name, int have, int want)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("lease \"%s\" has %d %s, not %d",
					text_to_cstring(name), have,
					have == 1 ? "slot" : "slots", want),
			 errdetail("Every caller of a lease must give the same slots; without slots => a lease has 1."),
			 errhint("A lease's slots can change only while none of its terms runs or keeps it (min_hold) and no candidate waits for it.")));
}
