// voxd's web page (GET /) in Debian's headless Chromium, driven by Playwright, against a real
// `voxd serve` (tests/web/run_page_test.py starts it with an API key and en-demo + zh-demo):
// speak Chinese text and hear it before it is all made, watch the live panel move, and the
// messages for empty text and a missing key. VOXD_BASE_URL, VOXD_KEY; VOXD_SCREENSHOTS: a
// folder for the page's screenshots (desktop and phone width).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

const base = process.env.VOXD_BASE_URL;
const key = process.env.VOXD_KEY;
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    // This machine's network is closed: no background connections, no sandbox as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--autoplay-policy=no-user-gesture-required"],
  });
});
after(async () => { await browser?.close(); });

async function openPage(width = 1200) {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + "/");
  return { page, errors };
}

async function withKey(page) {
  await page.fill("#key", key);
  await page.dispatchEvent("#key", "change");
  await page.waitForFunction(() => document.querySelectorAll("#voice option").length > 0);
}

test("without the key the page says the server needs one", async () => {
  const { page, errors } = await openPage();
  await page.waitForFunction(() => document.getElementById("status").textContent !== "");
  assert.match(await page.textContent("#status"), /needs an API key/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("Chinese text plays while it is made, then as a file of its length", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  const voices = await page.$$eval("#voice option", (o) => o.map((x) => x.value));
  assert.deepEqual(voices, ["en-demo", "zh-demo"]);
  await page.selectOption("#voice", "zh-demo");
  await page.fill("#text", "今天天气真好，我们一起去银行。下午三点见！");
  await page.click("#generate");
  await page.waitForFunction(() => document.body.dataset.doneAt ||
                             document.getElementById("status").className === "error",
                             null, { timeout: 120000 });
  assert.equal(await page.getAttribute("#status", "class"), "",
               await page.textContent("#status"));
  const first = Number(await page.evaluate(() => document.body.dataset.firstAudioAt));
  const done = Number(await page.evaluate(() => document.body.dataset.doneAt));
  assert.ok(first > 0 && first < done, `first audio at ${first} ms, done at ${done} ms`);
  await page.waitForFunction(() => {
    const audio = document.getElementById("player");
    return !audio.hidden && audio.readyState >= 1 && Number.isFinite(audio.duration);
  });
  const seconds = await page.$eval("#player", (a) => a.duration);
  assert.ok(seconds > 3 && seconds < 9, `${seconds} s for 19 syllables`);
  assert.match(await page.textContent("#status"), /^Done: /);
  assert.ok(await page.isVisible("#download"));
  assert.deepEqual(errors, []);
  await page.close();
});

test("the live panel shows the server's memory, updated every second", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  await page.waitForFunction(() => document.querySelectorAll("#live tr").length > 5);
  const rows = await page.$$eval("#live tr", (r) => r.map((x) => x.textContent));
  assert.ok(rows.some((r) => /^Weights\d+\.\d MiB$/.test(r)), rows.join(" | "));
  assert.ok(rows.some((r) => /^Leak watchdog/.test(r)), rows.join(" | "));
  const updated = await page.textContent("#live-status");
  await page.waitForFunction((was) => document.getElementById("live-status").textContent !== was,
                             updated, { timeout: 5000 });
  if (process.env.VOXD_SCREENSHOTS) {
    await page.screenshot({ path: process.env.VOXD_SCREENSHOTS + "/web-page.png" });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: process.env.VOXD_SCREENSHOTS + "/web-page-phone.png",
                            fullPage: true });
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test("empty text is refused with a message, nothing sent", async () => {
  const { page } = await openPage();
  await withKey(page);
  await page.fill("#text", "   ");
  await page.click("#generate");
  assert.match(await page.textContent("#status"), /nothing to say/);
  await page.close();
});
