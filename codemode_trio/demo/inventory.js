// A cell that calls Python tools: run it with
//   codemode-trio run examples/inventory.js --tools examples/tools.py
const items = ["apple", "pear", "plum"];
// The three calls run concurrently: each is its own delegate task on the Python side.
const counts = await Promise.all(items.map((item) => tools.stock({ item })));
notify(`checked ${items.length} items`);
items.forEach((item, i) => text(`${item}: ${counts[i]}`));
text(`total: ${await tools.add({ a: counts[0], b: counts[1] + counts[2] })}`);
