// Checks and steps shared by the e2e scripts: each failure is printed as
// "FAIL: ..." and counted; failures() is the count so far.
let count = 0;

export function failures() {
  return count;
}

// Counts a failure unless `ok`, with `detail` as JSON when given.
export function check(ok, what, detail) {
  if (ok) return;
  count++;
  console.log(`FAIL: ${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
}

// Runs one named step; an exception fails it (its class and message shown).
export async function step(name, fn) {
  try {
    await fn();
    console.log(`ok: ${name}`);
  } catch (e) {
    count++;
    console.log(`FAIL: ${name}: ${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`);
  }
}
