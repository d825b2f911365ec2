// Validates sampled outputs against their JSON schemas with ajv (draft 2020-12, formats on).
// usage: node validate.mjs FILE   FILE: {"schemas": {id: schema}, "outputs": [{"schema", "text"}]}
// Prints one JSON line: {"total", "valid", "failures": [{"schema", "text", "why"}]}.
import fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const { schemas, outputs } = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const validators = {};
for (const [id, schema] of Object.entries(schemas)) validators[id] = ajv.compile(schema);
const failures = [];
let valid = 0;
for (const { schema, text } of outputs) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    failures.push({ schema, text, why: `not JSON: ${e.message}` });
    continue;
  }
  if (validators[schema](value)) {
    valid += 1;
  } else {
    failures.push({ schema, text, why: ajv.errorsText(validators[schema].errors) });
  }
}
console.log(JSON.stringify({ total: outputs.length, valid, failures }));
