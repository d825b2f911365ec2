// Loads colibri's web page in headless Chromium (playwright-core driving Debian's chromium),
// sends a message with greedy settings and reports what the page showed, as one JSON line.
// usage: node page_test.mjs URL API_KEY CHROMIUM SCREENSHOT_PATH
import { chromium } from 'playwright-core';

const [url, key, executablePath, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
const out = { console: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 720 } });
  page.on('console', (m) => { if (m.type() === 'error') out.console.push(m.text()); });
  page.on('pageerror', (e) => out.console.push(String(e)));
  // The key the page would ask for, stored as the page stores it, before the page loads.
  await page.addInitScript((k) => localStorage.setItem('colibri-key', k), key);
  await page.goto(url);
  await page.waitForFunction(() => !document.getElementById('model').textContent.includes('…'));
  out.model = await page.textContent('#model');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '12');
  await page.fill('#prompt', 'Tell me about the sea.');
  // Every state an assistant bubble goes through, recorded in the page as it happens: a short
  // answer on a quiet machine can be done before the test could look at it.
  await page.evaluate(() => {
    window.__states = [];
    const note = (el) => {
      if (el.nodeType !== 1) return;
      const bubbles = el.matches('.msg.assistant') ? [el] : [...el.querySelectorAll('.msg.assistant')];
      for (const b of bubbles) window.__states.push(b.getAttribute('data-state'));
    };
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.type === 'attributes') note(r.target);
        for (const n of r.addedNodes || []) note(n);
      }
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
  });
  await page.click('#send');
  const reply = page.locator('.msg.assistant').first();
  await reply.waitFor();
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 120000 });
  out.streaming_seen = await page.evaluate(() => window.__states.includes('streaming'));
  out.answer = await reply.locator('.answer').textContent();
  out.meta = await reply.locator('.meta').textContent();
  out.tps = await page.textContent('#stat-tps');
  // Regenerate: the same greedy answer again, in place of the first.
  await page.click('#regenerate');
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 120000 });
  out.regenerated = await page.locator('.msg.assistant .answer').first().textContent();
  out.assistant_bubbles = await page.locator('.msg.assistant').count();
  // The live panel polls /metrics and /stats once a second.
  await page.waitForFunction(() => document.getElementById('stat-hit').textContent !== '–', null, { timeout: 30000 });
  // (Heat arrives with the finished request's routing report: wait for a poll after it.)
  await page.waitForFunction(() => /^[1-9]\d* experts seen$/.test(document.getElementById('status').textContent),
                             null, { timeout: 30000 });
  out.hit = await page.textContent('#stat-hit');
  out.status = await page.textContent('#status');
  out.tiers = await page.textContent('#tier-legend');
  if (screenshot) await page.screenshot({ path: screenshot });
  // Stop: a long reply is cut once it has started streaming; the page keeps what came.
  await page.fill('#max-tokens', '4000');
  await page.fill('#prompt', 'And the river?');
  await page.click('#send');
  const long = page.locator('.msg.assistant').nth(1);
  // Streaming with an answer, or (a short reply on a quiet machine, within one poll) done already.
  await page.waitForFunction(() => {
    const b = document.querySelectorAll('.msg.assistant')[1];
    return b && ((b.dataset.state === 'streaming' && b.querySelector('.answer')) || b.dataset.state === 'done');
  }, null, { timeout: 60000 });
  // On a quiet machine the tiny model can reach its end-of-sequence token before the click lands:
  // then there is nothing to stop (the test checks Stop only when it could be pressed).
  out.stop_raced = !(await page.isEnabled('#stop'));
  if (!out.stop_raced) await page.click('#stop', { timeout: 5000 }).catch(() => { out.stop_raced = true; });
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[1].dataset.state === 'done', null,
                             { timeout: 30000 });
  out.stopped_meta = await long.locator('.meta').textContent();
  out.send_enabled = await page.isEnabled('#send');
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
