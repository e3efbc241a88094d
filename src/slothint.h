/*-------------------------------------------------------------------------
 *
 * slothint.h
 *		The slot this backend last found an owner's term of a name in
 *		(slothint.c): a hint, checked before it is used.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTHINT_H
#define HOPLOCK_SLOTHINT_H

#include "hoplock.h"

extern void hl_slot_hint_set(text *name, text *owner, int slot);
extern int	hl_slot_hint(text *name, text *owner);

#endif							/* HOPLOCK_SLOTHINT_H */
