// Loads the status page in headless Chromium during a simulated run and
// checks what an on-call engineer relies on: clusters and nodes render, the
// timeline fills live without a reload, a decision expands to its
// alternatives, a command's explain link answers with the causal chain, and
// the WAF chart is drawn. Saves a screenshot.
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

  await page.waitForSelector("section.cluster .node", { timeout: LONG });
  const nodes = await page.locator("section.cluster .node[title]").count();
  check(nodes > 0, "no node is shown");

  // Live: entries keep arriving on the open page, and a failure among them.
  const first = await page.locator("#timeline .entry").count();
  await page.waitForFunction((n) => document.querySelectorAll("#timeline .entry").length > n, first, { timeout: LONG });
  await page.waitForSelector('#timeline .entry[data-kind="failure"]', { timeout: LONG });
  await page.waitForSelector('#timeline .entry[data-kind="command"] a.explain', { timeout: LONG });

  // A decision that weighed alternatives expands to them, the chosen one marked.
  const decision = page.locator('#timeline .entry[data-kind="decision"]', { hasText: /[2-9] alternatives/ }).first();
  await decision.locator("summary").click();
  const table = decision.locator("table.alternatives");
  await table.waitFor({ state: "visible", timeout: LONG });
  check(await table.locator("tr.chosen").count() === 1, "the expanded decision marks no chosen alternative");
  check(await table.locator("tr").count() >= 3, "the expanded decision shows fewer than 2 alternatives");

  // The explain link of a command gives its chain, as `unicron explain` does.
  const href = await page.locator('#timeline .entry[data-kind="command"] a.explain').first().getAttribute("href");
  const chain = await page.request.get(new URL(href, url).toString());
  const text = await chain.text();
  check(chain.ok(), `explain answered ${chain.status()}`);
  check(/^decision /m.test(text) && /^command /m.test(text), `explain text lacks the chain: ${text.slice(0, 200)}`);

  await page.locator("svg.waf-chart path").first().waitFor({ timeout: LONG });
  const marks = await page.locator("svg.waf-chart line").count();
  check(marks > 0, "the WAF chart marks no failure");

  await page.screenshot({ path: `${outDir}/status.png`, fullPage: true });
  check(errors.length === 0, `script errors on the page: ${errors.join("; ")}`);
  const entries = await page.locator("#timeline .entry").count();
  console.log(JSON.stringify({ nodes, entries, failure_marks: marks, explain_bytes: text.length }));
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
