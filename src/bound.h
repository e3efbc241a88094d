/*-------------------------------------------------------------------------
 *
 * bound.h
 *		The names of the terms this session bound to itself (bound.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_BOUND_H
#define HOPLOCK_BOUND_H

extern void hl_bound_add(text *name);
extern char **hl_bound_names(int *count);
extern void hl_bound_forget(const char *name);
extern void hl_bound_forget_at_commit(const char *name);
extern void hl_bound_forget_all(void);
extern void hl_bound_init(void);

#endif							/* HOPLOCK_BOUND_H */
