// A fastq worker in Node over HTTP: Node's own fetch, no npm package, nothing of
// fastq but its HTTP routes (docs/http.md, "Workers in any language", shows it).
//
//   node http_worker.js BASE_URL QUEUE work N     run jobs until N are settled
//   node http_worker.js BASE_URL QUEUE abandon    claim one job with a 1 s lease, never
//                                                 heartbeat; on a line of stdin, send
//                                                 its done late
//   node http_worker.js BASE_URL QUEUE hold N     claim N jobs with a 1 s lease, print
//                                                 them with their token, and hang
//   node http_worker.js BASE_URL QUEUE produce N   a producer: enqueue N "add" jobs in one
//                                                 request, then one with its own id
//   node http_worker.js BASE_URL QUEUE read ID     read a job back: state, result
// Prints one JSON line: what it did.
const [base, queue, mode, count] = process.argv.slice(2);
const headers = { "content-type": "application/json" };
if (process.env.FASTQ_TOKEN) headers.authorization = `Bearer ${process.env.FASTQ_TOKEN}`;

async function post(path, body) {
  const res = await fetch(base + path, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

// wait_s: a long poll, answered as soon as jobs come (or empty after wait_s)
const claim = (max, lease_s, worker, wait_s = 0) =>
  post(`/api/v1/queues/${queue}/claim`, { max, lease_s, worker, wait_s });

// What the jobs do: "add" sums its arguments; "explode" fails for good.
function run(job) {
  if (job.name === "explode") throw new Error("exploded on purpose");
  return job.args.reduce((a, b) => a + b, 0);
}

async function work(n) {
  const done = [], failed = [], statuses = [];
  const deadline = Date.now() + 60000;
  while (done.length + failed.length < n) {
    if (Date.now() > deadline) throw new Error("timed out");
    const { status, body } = await claim(4, 10, "node-w", 5);
    if (status !== 200) throw new Error(`claim: ${status} ${JSON.stringify(body)}`);
    if (body.jobs.length === 0) continue; // nothing came within wait_s: claim again
    const ack = { done: [], fail: [] };
    for (const job of body.jobs) {
      const path = `/api/v1/jobs/${encodeURIComponent(job.id)}`;
      // a long job heartbeats (within its lease) and may report how far it is
      const beat = await post(`${path}/heartbeat`,
        { token: job.token, progress: { fraction: 0.5, meta: "half" } });
      statuses.push(beat.status);
      try {
        ack.done.push({ id: job.id, token: job.token, result: run(job) });
      } catch (e) {
        ack.fail.push({ id: job.id, token: job.token, error: String(e), retry: false });
      }
    }
    // the claim's jobs settled in one request, each answered on its own
    const reply = await post(`/api/v1/queues/${queue}/ack`, ack);
    statuses.push(reply.status);
    if (reply.status !== 200) throw new Error(`ack: ${reply.status} ${JSON.stringify(reply.body)}`);
    for (const a of reply.body.done) if (a.ok) done.push(a.id); // else: lease_gone, runs again
    for (const a of reply.body.fail) if (a.ok) failed.push(a.id);
  }
  return { done, failed, statuses };
}

async function abandon() {
  const { body } = await claim(1, 1, "node-a");
  const job = body.jobs[0];
  console.log(JSON.stringify({ claimed: job.id, attempt: job.attempt }));
  await new Promise((ok) => process.stdin.once("data", ok)); // the test says when
  return post(`/api/v1/jobs/${encodeURIComponent(job.id)}/done`, { token: job.token, result: 1 });
}

// Jobs held by a worker that then hangs (the test kills it).
async function hold(n) {
  const { body } = await claim(n, 1, "node-h");
  console.log(JSON.stringify(body.jobs.map((job) => ({ id: job.id, token: job.token }))));
  await new Promise(() => {});
}

// A producer over HTTP: a blast in one request, one job with an id of its own.
async function produce(n) {
  const jobs = Array.from({ length: n }, (_, i) => ({ name: "add", args: [i, i] }));
  const blast = await post(`/api/v1/queues/${queue}/jobs`, jobs);
  const one = await post(`/api/v1/queues/${queue}/jobs`,
    { name: "add", args: [40, 2], id: "node-42", tags: ["from-node"] });
  return { statuses: [blast.status, one.status], ids: [...blast.body.ids, ...one.body.ids] };
}

async function read(id) {
  const res = await fetch(`${base}/api/v1/jobs/${encodeURIComponent(id)}`, { headers });
  return { status: res.status, body: await res.json() };
}

(async () => {
  const modes = { work: () => work(Number(count)), abandon, produce: () => produce(Number(count)),
                  read: () => read(count), hold: () => hold(Number(count)) };
  const out = await modes[mode]();
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => { console.error(String(e)); process.exit(1); });
