// Event payloads and the exact reading of 64-bit numbers.

/** What a notification on hoplock's channel claims. Any role may NOTIFY
 *  on the channel: a payload is a hint, never proof. */
export interface Payload {
  event: string;
  name: string;
  /** exact, from generation_text (null if absent or unreadable) */
  generation: bigint | null;
  /** the event number, exact, from seq_text */
  seq: bigint | null;
  owner: string | null;
  value: string | null;
  /** the slot of the term, for a lease with slots (null: none given) */
  slot: number | null;
}

const INT = /^-?[0-9]{1,19}$/;

function exact(ev: Record<string, unknown>, key: string): bigint | null {
  const text = ev[key + '_text'];
  if (typeof text === 'string' && INT.test(text)) return BigInt(text);
  const n = ev[key];
  // JSON.parse rounds integers above 2^53: only a safe one is exact
  if (typeof n === 'number' && Number.isSafeInteger(n)) return BigInt(n);
  return null;
}

/** Reads one payload of the channel, or returns null if it is not of
 *  hoplock's shape. Generations and event numbers are read from
 *  generation_text and seq_text (JSON.parse loses digits above 2^53). */
export function parsePayload(payload: string | undefined | null): Payload | null {
  if (typeof payload !== 'string') return null;
  let ev: unknown;
  try {
    ev = JSON.parse(payload);
  } catch {
    return null;
  }
  if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) return null;
  const o = ev as Record<string, unknown>;
  if (typeof o.event !== 'string' || typeof o.name !== 'string') return null;
  return {
    event: o.event,
    name: o.name,
    generation: exact(o, 'generation'),
    seq: exact(o, 'seq'),
    owner: typeof o.owner === 'string' ? o.owner : null,
    value: typeof o.value === 'string' ? o.value : null,
    slot: typeof o.slot === 'number' && Number.isSafeInteger(o.slot) ? o.slot : null,
  };
}
