/*-------------------------------------------------------------------------
 *
 * session.h
 *		Session-bound terms: a session's exit ends them (session.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SESSION_H
#define HOPLOCK_SESSION_H

extern void hl_session_prepare(void);

#endif							/* HOPLOCK_SESSION_H */
