/*-------------------------------------------------------------------------
 *
 * slothint.c
 *		The slot this backend last found an owner's term of a name with
 *		slots in -- the one it began or extended, renewed or released
 *		(slots.c) -- for a few (name, owner) pairs, in backend memory.
 *
 *		It is a hint, never a fact: a renew, release or proclaim tries
 *		that slot first and acts on it only if the row is the owner's
 *		running term, committed and not being changed (the core checks,
 *		lease.h owners_term_only), which is then the owner's only one; an
 *		acquire tries that slot first among the free ones.  A stale hint
 *		-- the term ended, its transaction rolled back, the name forgotten
 *		or given another number of slots -- costs one look and changes
 *		nothing.  What it saves: reading every slot's row for a call about
 *		one term, and, under contention, a client racing the others for
 *		the same free slot when the one it had is free again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "slothint.h"
#include "slotkey.h"

/* (name, owner) pairs remembered; the oldest is replaced */
#define SLOT_HINTS	4

typedef struct SlotHint
{
	int			slot;			/* 0: empty */
	int			name_len;
	int			owner_len;
	char		name[HL_SLOT_NAME_MAX];
	char		owner[HL_MAX_NAME_BYTES];
} SlotHint;

static SlotHint hints[SLOT_HINTS];
static int	next_hint = 0;

static SlotHint *
find_hint(text *name, text *owner)
{
	int			nlen = VARSIZE_ANY_EXHDR(name);
	int			olen = VARSIZE_ANY_EXHDR(owner);

	for (int i = 0; i < SLOT_HINTS; i++)
	{
		SlotHint   *h = &hints[i];

		if (h->slot > 0 && h->name_len == nlen && h->owner_len == olen &&
			memcmp(h->name, VARDATA_ANY(name), nlen) == 0 &&
			memcmp(h->owner, VARDATA_ANY(owner), olen) == 0)
			return h;
	}
	return NULL;
}

/* Remember "slot" as where the owner's term of "name" is */
void
hl_slot_hint_set(text *name, text *owner, int slot)
{
	int			nlen = VARSIZE_ANY_EXHDR(name);
	int			olen = VARSIZE_ANY_EXHDR(owner);
	SlotHint   *h = find_hint(name, owner);

	if (h == NULL)
	{
		if (nlen > HL_SLOT_NAME_MAX || olen > HL_MAX_NAME_BYTES)
			return;
		h = &hints[next_hint];
		next_hint = (next_hint + 1) % SLOT_HINTS;
		h->name_len = nlen;
		h->owner_len = olen;
		memcpy(h->name, VARDATA_ANY(name), nlen);
		memcpy(h->owner, VARDATA_ANY(owner), olen);
	}
	h->slot = slot;
}

/* The slot last remembered for the owner's term of "name"; 0 if none */
int
hl_slot_hint(text *name, text *owner)
{
	SlotHint   *h = find_hint(name, owner);

	return h != NULL ? h->slot : 0;
}
