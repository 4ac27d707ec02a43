// Renders the pages a reviewer reads in a real browser (Debian's chromium through playwright-core)
// and reports what they show: for each page, the rendered Markdown block holding a marker text, its
// tables (header and rows as text), whether any Markdown is left raw, its links with the status each
// answers, and a screenshot. The demo (cmd/stands-demo) asserts on the report.
//
// Input on stdin (never argv: it holds a password), JSON:
//   {"base": "http://127.0.0.1:PORT/", "user": "..." (none: anonymous), "password": "...", "outDir": "...",
//    "pages": [{"name": "plan-comment", "path": "demo/stands/pulls/1", "marker": "Stands plan for"}]}
// Output on stdout, JSON: {"pages": [{"name", "url", "found", "styled", "tables": [{"header": [...], "rows": [[...]]}],
//   "rawMarkdown": bool, "links": [{"href", "status"}], "screenshot", "text", "elements": [tag, ...]}]}
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';

const input = JSON.parse(readFileSync(0, 'utf8'));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // Only loopback is reachable: no name resolves, and chromium's own calls home are off.
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-pings', '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.setDefaultTimeout(30000);
  // Without a user, the pages are read as an anonymous reader reads a public repository.
  if (input.user) {
    await page.goto(new URL('user/login', input.base).href);
    await page.fill('#user_name', input.user);
    await page.fill('#password', input.password);
    await Promise.all([page.waitForNavigation(), page.press('#password', 'Enter')]);
    if (page.url().includes('/user/login')) throw new Error(`login as ${input.user} failed`);
  }
  const report = { pages: [] };
  for (const p of input.pages) {
    const url = new URL(p.path, input.base).href;
    await page.goto(url, { waitUntil: 'load' });
    const block = page.locator('.markup', { hasText: p.marker }).last();
    const found = (await block.count()) > 0;
    // Gitea's own stylesheet applied: without its built front end a page is bare HTML, and a screenshot
    // of it is not what a reviewer sees.
    const styled = await page.evaluate(() => [...document.styleSheets].some((s) => /\/assets\/css\/index[.-]/.test(s.href || '') && s.cssRules.length > 100));
    const out = { name: p.name, url, found, styled, tables: [], rawMarkdown: false, links: [], screenshot: '', text: '', elements: [] };
    if (found) {
      out.tables = await block.evaluate((el) => [...el.querySelectorAll('table')].map((t) => ({
        header: [...t.querySelectorAll('thead th, tr:first-child th')].map((c) => c.innerText.trim()),
        rows: [...t.querySelectorAll('tbody tr')].map((r) => [...r.querySelectorAll('td')].map((c) => c.innerText.trim())),
      })));
      out.text = await block.evaluate((el) => el.innerText);
      out.elements = await block.evaluate((el) => [...el.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()));
      // A table left as text shows its delimiter row; bold left as text shows its asterisks.
      out.rawMarkdown = await block.evaluate((el) => /\|\s*-{3,}\s*\||\*\*\S/.test(el.innerText));
      const hrefs = await block.evaluate((el) => [...new Set([...el.querySelectorAll('a[href]')].map((a) => a.href))]);
      for (const href of hrefs) {
        let status = 0;
        try {
          status = (await context.request.get(href, { maxRedirects: 5 })).status();
        } catch (e) {
          status = -1;
        }
        out.links.push({ href, status });
      }
      await block.scrollIntoViewIfNeeded();
      out.screenshot = `${input.outDir}/${p.name}.png`;
      await page.screenshot({ path: out.screenshot, fullPage: false });
    }
    report.pages.push(out);
  }
  process.stdout.write(JSON.stringify(report) + '\n');
} finally {
  await browser.close();
}
