/*-------------------------------------------------------------------------
 *
 * session.h
 *		Session-bound terms: a session's exit, or DISCARD ALL, ends them
 *		(session.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SESSION_H
#define HOPLOCK_SESSION_H

extern void hl_session_prepare(void);
extern void hl_session_discard(void);

#endif							/* HOPLOCK_SESSION_H */
