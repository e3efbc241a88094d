/*
 * bench/listen.c: a LISTENing client on libpq, for bench/mass_expiry.sh.
 * It notes the arrival of each notification of a channel whose payload
 * contains every one of the given strings, and once it has "count" of
 * them (or after "timeout" seconds) prints one line per notification:
 * its arrival (epoch seconds, microseconds) and its payload.  It prints
 * "listening" once its LISTEN is done, so that the caller can begin.
 * The arrival is noted as soon as libpq hands the notification over, so
 * the figures are the server's delivery, not a client library's parsing.
 *
 *   listen CONNINFO CHANNEL COUNT TIMEOUT [SUBSTRING...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/time.h>

#include "libpq-fe.h"

typedef struct Arrival
{
	double		at;
	char	   *payload;
} Arrival;

static double
now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	PGresult   *res;
	char		sql[256];
	long		want;
	double		deadline;
	long		got = 0;
	Arrival    *arrivals;

	if (argc < 5)
	{
		fprintf(stderr, "usage: %s CONNINFO CHANNEL COUNT TIMEOUT [SUBSTRING...]\n", argv[0]);
		return 2;
	}
	want = atol(argv[3]);
	arrivals = calloc(want > 0 ? want : 1, sizeof(Arrival));
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "listen: %s", PQerrorMessage(conn));
		return 1;
	}
	snprintf(sql, sizeof(sql), "LISTEN %s", argv[2]);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "listen: %s", PQerrorMessage(conn));
		return 1;
	}
	PQclear(res);
	printf("listening\n");
	fflush(stdout);

	deadline = now() + atof(argv[4]);
	while (got < want && now() < deadline)
	{
		int			sock = PQsocket(conn);
		fd_set		input;
		struct timeval tv = {0, 100000};
		PGnotify   *note;

		FD_ZERO(&input);
		FD_SET(sock, &input);
		if (select(sock + 1, &input, NULL, NULL, &tv) < 0)
			break;
		if (!PQconsumeInput(conn))
		{
			fprintf(stderr, "listen: %s", PQerrorMessage(conn));
			return 1;
		}
		while (got < want && (note = PQnotifies(conn)) != NULL)
		{
			double		at = now();
			int			keep = 1;

			for (int i = 5; i < argc && keep; i++)
				keep = strstr(note->extra, argv[i]) != NULL;
			if (keep)
			{
				arrivals[got].at = at;
				arrivals[got].payload = strdup(note->extra);
				got++;
			}
			PQfreemem(note);
		}
	}
	for (long i = 0; i < got; i++)
		printf("%.6f %s\n", arrivals[i].at, arrivals[i].payload);
	PQfinish(conn);
	return got < want ? 1 : 0;
}
