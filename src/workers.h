/*-------------------------------------------------------------------------
 *
 * workers.h
 *		The background workers: the launcher, the per-database worker,
 *		and the hooks that tell them about databases (launcher.c,
 *		worker.c, dbhooks.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_WORKERS_H
#define HOPLOCK_WORKERS_H

#include "hoplock.h"
#include "fmgr.h"

extern void hl_register_launcher(void);
extern void hl_install_hooks(void);
extern void hl_wake_launcher_at_commit(void);
extern PGDLLEXPORT void hoplock_launcher_main(Datum arg);
extern PGDLLEXPORT void hoplock_worker_main(Datum arg);

#endif							/* HOPLOCK_WORKERS_H */
