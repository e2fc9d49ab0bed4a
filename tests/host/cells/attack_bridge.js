// Tries every route a cell has to the bridge between the prelude and Python, and prints
// {leaks, routes}: `leaks` names each value the cell got hold of that is neither its own,
// the host's API, a built-in, nor plain data (a function with source text, a buffer, a
// typed array, a Map); `routes` names each callback of the cell the host ran.
const define = Object.defineProperty;
const fnSource = Function.prototype.toString;
const classOf = Object.prototype.toString;
const call = Function.prototype.call.bind(Function.prototype.call);
const own = Object.getOwnPropertyNames;
const seen = {};
let count = 0;
const hits = {};
const cellFunctions = new Set();
let recording = true;
function note(route, value) {
  if (recording) seen[count++] = [route, value];
}
function hit(route) {
  hits[route] = true;
}
function mine(f) {
  cellFunctions.add(f);
  return f;
}
mine(note);
mine(hit);
mine(mine);
// The host's own functions are in reach by design: globals and tools.
for (const name of own(globalThis)) {
  if (typeof globalThis[name] === "function") mine(globalThis[name]);
}
for (const name of Object.keys(tools)) mine(tools[name]);
const sloppyProbe = Function(
  "note",
  "hit",
  "return function sloppyProbe(route) { hit(route); new Error('probe').stack;" +
    " try { note(route + ' caller', sloppyProbe.caller); } catch (e) {}" +
    " try { note(route + ' callee.caller', arguments.callee.caller); } catch (e) {} }",
)(note, hit);
mine(sloppyProbe);
const probe = mine((route) => {
  sloppyProbe(route);
  try {
    Error.captureStackTrace({});
  } catch (e) {}
});

// Every frame of every stack taken while the bridge is running, with its function and this.
Error.prepareStackTrace = mine((error, frames) => {
  for (let i = 0; i < frames.length; i++) {
    note("getFunction", frames[i].getFunction());
    note("getThis", frames[i].getThis());
  }
  let out = String(error);
  for (let i = 0; i < frames.length; i++) out += "\n    at " + String(frames[i]);
  return out;
});

// Recorders on what the bridge might call at run time.
const realThen = Promise.prototype.then;
Promise.prototype.then = mine(function (onFulfilled, onRejected) {
  note("then this", this);
  note("then onFulfilled", onFulfilled);
  note("then onRejected", onRejected);
  return call(realThen, this, onFulfilled, onRejected);
});
for (const name of ["get", "set", "delete", "has"]) {
  const real = Map.prototype[name];
  Map.prototype[name] = mine(function (...args) {
    note(`Map ${name} this`, this);
    note(`Map ${name} args`, args);
    return call(real, this, ...args);
  });
}
for (const name of ["apply", "call", "bind"]) {
  const real = Function.prototype[name];
  define(Function.prototype, name, {
    __proto__: null,
    value: mine(function (...args) {
      note(`${name} this`, this);
      note(`${name} args`, args);
      return Reflect.apply(real, this, args);
    }),
    writable: true,
    configurable: true,
  });
}
for (const key of ["0", "1", "2"]) {
  define(Array.prototype, key, {
    __proto__: null,
    get: mine(function () {
      note(`Array ${key} get`, this);
      return undefined;
    }),
    set: mine(function (value) {
      note(`Array ${key} set`, this);
      define(this, key, { __proto__: null, value, writable: true, enumerable: true, configurable: true });
    }),
    configurable: true,
  });
}
for (const key of ["get", "set", "value", "error", "missing", "toJSON"]) {
  define(Object.prototype, key, {
    __proto__: null,
    get: mine(function () {
      note(`Object.prototype.${key} this`, this);
      return undefined;
    }),
    set: mine(function (value) {
      define(this, key, { __proto__: null, value, writable: true, enumerable: true, configurable: true });
    }),
    configurable: true,
  });
}

// Names in reach of the cell's code.
for (const name of own(globalThis)) note(`global ${name}`, globalThis[name]);
for (const name of ["__codemode", "__codemode_push", "__codemode_sync", "dispatch", "channel",
  "push", "sync", "post", "send", "request", "calls", "timers", "settle", "fire", "start"]) {
  try {
    note(`eval ${name}`, (0, eval)(name));
  } catch (e) {}
  try {
    note(`Function ${name}`, Function(`return ${name}`)());
  } catch (e) {}
}
try {
  note("arguments.callee", arguments.callee);
} catch (e) {}

// Cell code called back while the bridge is on the stack.
text({ get a() { probe("text getter"); return 1; } });
text({ toJSON: mine(() => { probe("text toJSON"); return "x"; }) });
store("k", { toJSON: mine(() => { probe("store toJSON"); return 1; }) });
notify({ toJSON: mine(() => { probe("notify toJSON"); return "n"; }) });
load({ toString: mine(() => { probe("load toString"); return "k"; }) });
image({
  get type() { probe("image type getter"); return undefined; },
  get image_url() { probe("image url getter"); return "data:image/png;base64,AAAA"; },
});
content([{ get type() { probe("content getter"); return "text"; }, text: "t" }]);
const trap = (name) => mine((...args) => {
  probe(`proxy ${name}`);
  note(`proxy ${name} args`, args);
  return Reflect[name](...args);
});
const proxied = new Proxy({ value: 1 }, {
  get: trap("get"),
  ownKeys: trap("ownKeys"),
});
const answer = await tools.echo(proxied);
note("tool answer", answer);
await new Promise(mine((resolve) => setTimeout(mine(() => { probe("timer"); resolve(); }), 1)));
for await (const settled of as_settled([tools.echo({ value: 1 })])) note("settled", settled);
await stream_settled([tools.echo({ value: 2 })], mine((settled) => { probe("stream callback"); note("streamed", settled); }));
try {
  await import("anything");
} catch (e) {
  note("import error", e);
}
Error.prepareStackTrace = undefined;
recording = false;

// Anything that is not the cell's own, a built-in, or plain data is a leak.
const internal = ["[object SharedArrayBuffer]", "[object ArrayBuffer]", "[object Map]",
  "[object Uint16Array]", "[object Uint32Array]", "[object DataView]"];
function suspicious(value) {
  if (typeof value === "function") {
    return !cellFunctions.has(value) && !call(fnSource, value).includes("[native code]");
  }
  return value !== null && typeof value === "object" && internal.includes(call(classOf, value));
}
const leaks = [];
for (let i = 0; i < count; i++) {
  const [route, value] = seen[i];
  if (suspicious(value)) leaks.push(route);
  if (value !== null && typeof value === "object") {
    let keys = [];
    try { keys = Reflect.ownKeys(value); } catch (e) {}
    for (const key of keys) {
      let member;
      try { member = Reflect.getOwnPropertyDescriptor(value, key)?.value; } catch (e) {}
      if (suspicious(member)) leaks.push(`${route} .${String(key)}`);
    }
  }
}
for (const name of own(globalThis)) {
  if (/codemode|bridge|channel|dispatch/i.test(name)) leaks.push(`global name ${name}`);
}
const routes = Object.keys(hits).sort();
text(JSON.stringify({ leaks, routes }));
