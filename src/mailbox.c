/*-------------------------------------------------------------------------
 *
 * mailbox.c
 *		What backends tell their database's expiry worker, through the
 *		slot's mailbox in shared memory (shmem.c): the deadline of a term
 *		that begins, or of a renewal that moves the expiry earlier, posted
 *		when the transaction commits (before, the worker could not read the
 *		term); a session that ended without ending its bound terms, and
 *		a candidate asking the holder to step down (preempt), posted at
 *		once.
 *
 *		The deadlines wait in a list of this file's own, in
 *		TopTransactionContext, dropped with a subtransaction that aborts.
 *		Posting them at commit allocates nothing.  A transaction that began
 *		more than COALESCE_AT terms posts them too if the mailbox has room
 *		for them and half of it left, and otherwise one message instead,
 *		asking the worker to read the table again: so one big transaction
 *		cannot fill the mailbox and crowd out the deadlines of everyone
 *		else's terms, and the worker's work stays proportional to the terms
 *		begun (reading the table costs it every row, and a stream of
 *		transactions each asking for that would cost it far more than they
 *		cost their role).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "shmem.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"

typedef struct PendingDeadline
{
	struct PendingDeadline *next;
	int			nest_level;		/* subtransaction that queued it */
	HlMessage	msg;
} PendingDeadline;

/* Newest first, in TopTransactionContext */
static PendingDeadline *pending = NULL;

/*
 * More deadlines than this in one transaction: one "read again" instead,
 * unless the mailbox has room for them and still half of it free
 */
#define COALESCE_AT		64

static void
fill_name(HlMessage *msg, text *name)
{
	msg->namelen = Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES);
	memcpy(msg->name, VARDATA_ANY(name), msg->namelen);
}

/*
 * Queue a message of "kind" about "name" (expires_at: the term's, for the
 * coalescing; start: the message's session_start) for this transaction's
 * commit.
 */
static void
queue_at_commit(HlMessageKind kind, text *name, TimestampTz expires_at,
				TimestampTz start)
{
	PendingDeadline *item;

	if (hl_shared == NULL)
		return;
	item = MemoryContextAllocZero(TopTransactionContext,
								  sizeof(PendingDeadline));
	item->msg.kind = kind;
	item->msg.expires_at = expires_at;
	item->msg.session_start = start;
	fill_name(&item->msg, name);
	item->nest_level = GetCurrentTransactionNestLevel();
	item->next = pending;
	pending = item;
}

/* Post a message of "kind" about "name" (NULL: none) at once. */
static void
post_now(HlMessageKind kind, text *name, int32 pid, TimestampTz start)
{
	HlMessage	msg;

	if (hl_shared == NULL)
		return;
	memset(&msg, 0, offsetof(HlMessage, name));
	msg.kind = kind;
	msg.session_pid = pid;
	msg.session_start = start;
	if (name != NULL)
		fill_name(&msg, name);
	hl_post(MyDatabaseId, &msg);
}

/* Tell the worker of "name"'s new deadline once this transaction commits. */
void
hl_post_deadline_at_commit(text *name, TimestampTz expires_at)
{
	queue_at_commit(HL_MSG_DEADLINE, name, expires_at, 0);
}

/*
 * Tell the worker, once this transaction commits, to end the term of
 * "generation" of "name" it handed to a candidate, should the candidate
 * not be waiting for it any more by then (lease.c checks, and that the
 * term was not taken).  Queued with the deadlines, so "expires_at" is the
 * term's.
 */
void
hl_post_handed_at_commit(text *name, int64 generation, TimestampTz expires_at)
{
	queue_at_commit(HL_MSG_ABANDONED, name, expires_at, generation);
}

/* Tell the worker that session (pid, start) ended with "name" bound to it. */
void
hl_post_session_end(text *name, int32 pid, TimestampTz start)
{
	post_now(HL_MSG_SESSION_END, name, pid, start);
}

/*
 * Tell the worker that the term of "generation" of "name", which a handoff
 * wrote for this backend while it waited, has nobody: the wait ended
 * without it.  The worker ends it once the handoff has committed (or
 * finds nothing to end if it rolled back).
 */
void
hl_post_abandoned(text *name, int64 generation)
{
	post_now(HL_MSG_ABANDONED, name, 0, generation);
}

/*
 * Tell the worker that a candidate of "name" waits with preempt => true:
 * it asks the holder to step down to the first such candidate, if the
 * term's priority is lower (lease.c).  Posted at once: the candidate's
 * transaction stays open while it waits, so it cannot write the request
 * itself.
 */
void
hl_post_preempt(text *name)
{
	post_now(HL_MSG_PREEMPT, name, 0, 0);
}

/*
 * Ask the worker to read the table again (it finds there what messages
 * could not say: handed terms nobody took), at once.
 */
void
hl_post_read_again(void)
{
	post_now(HL_MSG_READ_AGAIN, NULL, 0, 0);
}

static void
mailbox_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			{
				int			n = 0;
				HlMessage	again;

				for (PendingDeadline *item = pending; item != NULL; item = item->next)
					n++;
				if (n <= COALESCE_AT ||
					n <= hl_mailbox_room(MyDatabaseId) -
					hl_shared->queue_size / 2)
				{
					for (PendingDeadline *item = pending; item != NULL; item = item->next)
						hl_post(MyDatabaseId, &item->msg);
				}
				else
				{
					memset(&again, 0, offsetof(HlMessage, name));
					again.kind = HL_MSG_READ_AGAIN;
					again.expires_at = DT_NOEND;
					for (PendingDeadline *item = pending; item != NULL; item = item->next)
						again.expires_at = Min(again.expires_at, item->msg.expires_at);
					hl_post(MyDatabaseId, &again);
				}
				pending = NULL;
				break;
			}
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			pending = NULL;
			break;
		default:
			break;
	}
}

static void
mailbox_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (pending != NULL && pending->nest_level >= level)
			pending = pending->next;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (PendingDeadline *item = pending;
			 item != NULL && item->nest_level >= level; item = item->next)
			item->nest_level = level - 1;
	}
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_mailbox_init(void)
{
	RegisterXactCallback(mailbox_xact_callback, NULL);
	RegisterSubXactCallback(mailbox_subxact_callback, NULL);
}
