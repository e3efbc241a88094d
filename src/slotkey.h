/*-------------------------------------------------------------------------
 *
 * slotkey.h
 *		How a lease with slots (slots => N, N > 1) is stored (slotkey.c).
 *
 *		Each slot's term is a lease row of its own, keyed "name" U+001F
 *		"k" (k = 1..N): a key no caller can give, since names hold no
 *		control characters.  Below the SQL functions a slot's row is an
 *		ordinary lease -- its term lock, its schedule entry, its expiry,
 *		its history -- and only what users see (events, messages, the
 *		views) shows it as the name and a slot number.
 *
 *		The row keyed by the name itself records N: a released row whose
 *		owner is U+001F followed by N in decimal (the "marker").  Every
 *		call of the name reads that row anyway, so a caller that gives
 *		another N finds out at no extra cost (lease.c).
 *
 *		Waiters and candidates of a slot are those of its name: the wait
 *		key of a slot's row is its name's (shmem.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTKEY_H
#define HOPLOCK_SLOTKEY_H

#include "hoplock.h"
#include "compat.h"				/* pg_attribute_noreturn() on 18 */

/* The separator between a name and its slot number in a slot's key */
#define HL_SLOT_SEP			'\x1f'

/* Most slots a name may have */
#define HL_SLOTS_MAX		1000

/* Longest name of a lease with slots: its slot keys fit a name's bytes */
#define HL_SLOT_NAME_MAX	(HL_MAX_NAME_BYTES - 5)

/*
 * The length of the name part of "key", a lease row's name: the whole of
 * it unless it is a slot's key.  *slot is the slot number, 0 if none.
 */
static inline int
hl_slot_split(const char *key, int len, int *slot)
{
	*slot = 0;
	for (int i = 0; i < len; i++)
	{
		if (key[i] == HL_SLOT_SEP)
		{
			int			k = 0;

			for (int j = i + 1; j < len && j < i + 6; j++)
			{
				if (key[j] < '0' || key[j] > '9')
					break;
				k = k * 10 + (key[j] - '0');
			}
			*slot = k;
			return i;
		}
	}
	return len;
}

extern text *hl_slot_key(text *name, int slot);
extern text *hl_slot_base(text *key, int *slot);
extern char *hl_lease_display_name(text *key);
extern int	hl_slot_marker(const Lease *lease);
extern text *hl_slot_marker_owner(int slots);
extern int	hl_slot_rows(text *name, int slots, Lease *rows, bool *found,
						 Lease *base, bool *base_found, bool busy);
extern text *hl_slot_key_of_generation(text *name, int slots,
										int64 generation);
extern void hl_slots_mismatch(text *name, int have, int want)
			pg_attribute_noreturn();

#endif							/* HOPLOCK_SLOTKEY_H */
