/** The README's settings table is generated from src/settings/table.ts; they must agree. */
import fs from 'node:fs';
import path from 'node:path';
import { renderSettingsMarkdown } from '../src/settings';

test('README settings table matches the settings table (run `make settings-table`)', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const m = /<!-- settings:start -->\n([\s\S]*?)<!-- settings:end -->/.exec(readme);
  expect(m).not.toBeNull();
  expect(m![1]!.trimEnd()).toBe(renderSettingsMarkdown().trimEnd());
});
