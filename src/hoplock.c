/*-------------------------------------------------------------------------
 *
 * hoplock.c
 *		Module entry point: defines the settings and hooks the transaction
 *		callbacks.  Loading hoplock through shared_preload_libraries also
 *		sets up its shared memory and background worker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	hoplock_define_gucs();
	hoplock_commit_init();
	hoplock_install_hooks();

	if (process_shared_preload_libraries_in_progress)
	{
		hoplock_shmem_init();
		hoplock_register_launcher();
	}
}
