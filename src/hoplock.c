/*-------------------------------------------------------------------------
 *
 * hoplock.c
 *		Module entry point: defines the settings, and lets each file hook
 *		the end-of-transaction work it owns.  Loading hoplock through
 *		shared_preload_libraries also sets up its shared memory and the
 *		launcher of the expiry workers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bound.h"
#include "events.h"
#include "expiries.h"
#include "fence.h"
#include "hoplock.h"
#include "refusals.h"
#include "settings.h"
#include "shmem.h"
#include "storage.h"
#include "wakeup.h"
#include "workers.h"

#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Load the module: settings, callbacks, hooks; with
 * shared_preload_libraries, shared memory and the launcher.
 */
void
_PG_init(void)
{
	hl_define_gucs();

	hl_rowwrite_init();
	hl_fence_init();
	hl_events_init();
	hl_mailbox_init();
	hl_wakeup_init();
	hl_bound_init();
	hl_install_hooks();

	if (process_shared_preload_libraries_in_progress)
	{
		hl_shmem_init();
		hl_expiries_shmem_init();
		hl_refusals_init();

		/*
		 * pg_upgrade runs the old and the new cluster in binary-upgrade
		 * mode: nothing may change their data then (no expiry announced, no
		 * branch begun).
		 */
		if (!IsBinaryUpgrade)
			hl_register_launcher();
	}
}
