-- read / write / delete: the low-level compare-and-swap.

-- No state: hoplock_write with a NULL handle starts a term...
SELECT show(hoplock_write('cas', NULL, 'a', '1 h'));
-- ...but only while there is no state.
SELECT show(hoplock_write('cas', NULL, 'b', '1 h'));

-- The current handle, same owner, running term: a renewal (same generation).
SELECT handle AS h1 FROM hoplock_read('cas') \gset
SELECT show(l), l.handle <> :'h1' AS new_handle
  FROM hoplock_write('cas', :'h1', 'a', '2 h') AS l;

-- The old handle is stale now.
SELECT show(hoplock_write('cas', :'h1', 'a', '1 h'));
SELECT hoplock_delete('cas', :'h1');
SELECT show(hoplock_read('cas'));

-- The current handle, another owner: a takeover, with a new generation.
SELECT handle AS h2 FROM hoplock_read('cas') \gset
SELECT show(hoplock_write('cas', :'h2', 'b', '50 ms'));

-- An expired state with its handle: a new generation, even for its owner.
SELECT pg_sleep(0.1);
SELECT handle AS h3 FROM hoplock_read('cas') \gset
SELECT show(hoplock_write('cas', :'h3', 'b', '1 h'));

-- Delete with the current handle ends the term; read shows no state.
SELECT handle AS h4 FROM hoplock_read('cas') \gset
SELECT hoplock_delete('cas', :'h4');
SELECT show(hoplock_read('cas'));
SELECT hoplock_delete('cas', :'h4');

-- After delete, a NULL handle writes again, and generations keep rising.
SELECT show(hoplock_write('cas', NULL, 'c', '1 h'));

-- Handles are opaque: anything that is not the current handle never matches.
SELECT show(hoplock_write('cas', 'garbage', 'c', '1 h'));
SELECT show(hoplock_write('cas', '', 'c', '1 h'));
SELECT hoplock_delete('cas', 'garbage');
SELECT show(hoplock_holder('cas'));

-- Every committed change makes a new handle, renewals included...
CREATE TEMP TABLE handles (h text);
CREATE PROCEDURE renew_and_keep_handle(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO handles SELECT (hoplock_renew('cas', 'c', '1 h')).handle;
        COMMIT;
    END LOOP;
END $$;
CALL renew_and_keep_handle(5);
SELECT count(*) AS renewals, count(DISTINCT h) AS distinct_handles FROM handles;
-- ...and so do changes inside one transaction: the row's version is new
-- at every write (a handle is not made of the transaction's ID).
SELECT count(DISTINCT h) AS distinct_handles
  FROM (SELECT (hoplock_renew('cas', 'c', '1 h')).handle AS h
          FROM generate_series(1, 5)) AS s;

-- The handle names the generation (one of its ':'-separated parts) and
-- the version of the row, so it never repeats: not one of the handles
-- this name had before.  (Its layout is hoplock's business.)
SELECT l.generation::text = ANY (string_to_array(l.handle, ':')) AS names_generation,
       l.handle NOT IN (SELECT h FROM handles) AND
       l.handle NOT IN (:'h1', :'h2', :'h3', :'h4') AS never_seen_before
  FROM hoplock_renew('cas', 'c', '1 h') AS l;

-- acquire, renew and release are the same CAS: they interoperate.
SELECT handle AS h5 FROM hoplock_renew('cas', 'c', '1 h') \gset
SELECT hoplock_delete('cas', :'h5');
SELECT show(hoplock_acquire('cas', 'd', '1 h'));
SELECT handle AS h6 FROM hoplock_holder('cas') \gset
SELECT hoplock_release('cas', 'd');
SELECT show(hoplock_write('cas', :'h6', 'd', '1 h'));
