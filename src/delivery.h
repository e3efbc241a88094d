/*-------------------------------------------------------------------------
 *
 * delivery.h
 *		The worker's delivery of committed events as NOTIFY, in number
 *		order, and the pruning of the event log (delivery.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_DELIVERY_H
#define HOPLOCK_DELIVERY_H

/* Events sent per transaction */
#define HL_DELIVERY_BATCH	1000

typedef enum HlDeliveryResult
{
	HL_DELIVERY_DONE,			/* sent all there was */
	HL_DELIVERY_MORE,			/* a full batch: there may be more */
	HL_DELIVERY_PAUSED,			/* the NOTIFY queue is too full */
	HL_DELIVERY_BUSY			/* maintenance holds a table */
} HlDeliveryResult;

extern HlDeliveryResult hl_deliver(void);
extern bool hl_prune_events(void);
extern void hl_delivery_note_removal(void);

#endif							/* HOPLOCK_DELIVERY_H */
