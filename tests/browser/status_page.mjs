// Loads the status page in headless Chromium during a simulated run and
// checks what an on-call engineer relies on: the cluster list names the
// cluster and a click loads its nodes and WAF chart; the incidents table
// fills live with one row per failure, newest first, one recovered with
// its action and time to recovery; a row expands to its chain (decisions
// with their alternatives, commands, results, no-op decisions folded in);
// a command's explain link answers with the causal chain. Saves a
// screenshot.
//
// usage: node status_page.mjs URL OUT_DIR   (CHROMIUM overrides /usr/bin/chromium)
import { chromium } from "playwright-core";

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error("usage: node status_page.mjs URL OUT_DIR");
  process.exit(2);
}
const LONG = 120_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Without the background-networking flags Chromium keeps dialling hosts
  // this closed network refuses.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);

  // The cluster list: one row per cluster; a click loads its detail.
  const row = page.locator("#clusters tr.cluster-row").first();
  await row.waitFor({ timeout: LONG });
  const name = await row.getAttribute("data-cluster");
  check(name && (await row.textContent()).includes(name), "the cluster list does not name the cluster");
  await row.locator("td").first().click();
  await page.waitForSelector(`section.cluster[data-cluster="${name}"] .node[title]`, { timeout: LONG });
  const nodes = await page.locator("section.cluster .node[title]").count();
  check(nodes > 0, "the cluster's detail shows no node");

  // Incidents: one row per failure, newest first, one that recovered with
  // the action decided and its time to recovery.
  const first = page.locator('#incidents tbody.incident[data-state="recovered"]').first();
  await first.waitFor({ timeout: LONG });
  // Pinned by id: newer incidents keep arriving above it.
  const id = await first.getAttribute("data-id");
  const recovered = page.locator(`#incidents tbody.incident[data-id=${JSON.stringify(id)}]`);
  const decided = (await recovered.locator("td.decided").textContent()).trim();
  const ttr = (await recovered.locator("td.ttr").textContent()).trim();
  check(/^[a-z_]+/.test(decided) && decided !== "undecided", `the recovered incident shows no action: ${decided}`);
  check(/\d/.test(ttr), `the recovered incident shows no recovery time: ${ttr}`);
  const times = await page.locator("#incidents tbody.incident td.t").allTextContents();
  check(times.every((t, i) => i === 0 || times[i - 1] >= t), `incidents are not newest first: ${times.join(" ")}`);
  const ids = await page.locator("#incidents tbody.incident").evaluateAll((rows) => rows.map((r) => r.dataset.key));
  check(new Set(ids).size === ids.length, "a failure has more than one incident row");

  // A row expands to its chain: the decision, its commands with explain
  // links, their results, and the decisions that changed nothing folded in.
  await recovered.locator("tr.incident-row").click();
  const chain = recovered.locator("tr.chain");
  await chain.waitFor({ state: "visible", timeout: LONG });
  check(await chain.locator("li.ev-failure").count() === 1, "the chain does not start from its failure");
  // The failure says what found it: the rule and the line it read, or how.
  const why = await chain.locator("li.ev-failure .why").innerText();
  check(/^(rule \S+|heartbeat|process supervision|statistical|metric rule|log rule)/.test(why), `the failure does not say what found it: ${why}`);
  check(await chain.locator("li.ev-result").count() > 0, "the chain shows no result");
  // The decision on the last result follows the result onto the page.
  await chain.locator("li.ev-decision.noop").first().waitFor({ timeout: LONG });

  // The decision that acted expands to the alternatives it weighed.
  const alts = chain.locator("button.alts").first();
  if (await alts.count()) {
    await alts.click();
    const table = recovered.locator("table.alternatives");
    await table.waitFor({ state: "visible", timeout: LONG });
    check(await table.locator("tr.chosen").count() === 1, "the expanded decision marks no chosen alternative");
  }

  // The explain link of a command gives its chain, as `unicron explain` does.
  const href = await chain.locator("a.explain").first().getAttribute("href");
  const explain = await page.request.get(new URL(href, url).toString());
  const text = await explain.text();
  check(explain.ok(), `explain answered ${explain.status()}`);
  check(/^decision /m.test(text) && /^command /m.test(text), `explain text lacks the chain: ${text.slice(0, 200)}`);

  // The API answers in summary form and per cluster.
  const status = await (await page.request.get(new URL("api/status", url).toString())).json();
  check(status.clusters.length > 0 && status.clusters[0].nodes.total > 0 && !Array.isArray(status.clusters[0].nodes),
    "/api/status does not summarise the clusters");

  await page.locator("svg.waf-chart path").first().waitFor({ state: "attached", timeout: LONG });
  const marks = await page.locator("svg.waf-chart line").count();
  check(marks > 0, "the WAF chart marks no failure");

  await page.screenshot({ path: `${outDir}/status.png`, fullPage: true });
  check(errors.length === 0, `script errors on the page: ${errors.join("; ")}`);
  const incidents = await page.locator("#incidents tbody.incident").count();
  console.log(JSON.stringify({ cluster: name, nodes, incidents, decided, time_to_recovery: ttr, failure_marks: marks, explain_bytes: text.length }));
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
