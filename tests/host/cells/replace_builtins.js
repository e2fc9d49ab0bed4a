// Replaces, with accessors that throw, every built-in a bridge might call while a cell runs.
const hijack = function () { throw new Error("hijacked"); };
const define = Object.defineProperty;
const proto = Object.getPrototypeOf;
const TA = proto(Uint8Array.prototype);
const targets = [
  [proto([][Symbol.iterator]()), "next"],
  [Function.prototype, "call"], [Function.prototype, "apply"], [Function.prototype, "bind"],
  [Array.prototype, "push"], [Array.prototype, "shift"], [Array.prototype, "includes"],
  [Array.prototype, "values"], [Array.prototype, Symbol.iterator], [Array.prototype, "toJSON"],
  [JSON, "stringify"], [JSON, "parse"], [Object, "defineProperty"], [Object, "keys"], [Object, "create"],
  [Promise.prototype, "then"], [Promise.prototype, "catch"], [Promise, "resolve"], [Promise, "reject"], [Promise, Symbol.species],
  [Map.prototype, "get"], [Map.prototype, "set"], [Map.prototype, "delete"], [Map.prototype, "has"],
  [String.prototype, "toLowerCase"], [String.prototype, "slice"], [String.prototype, "charCodeAt"],
  [String.prototype, "indexOf"], [String.prototype, "trim"], [String.prototype, "startsWith"], [String.prototype, "replace"],
  [String, "fromCharCode"], [RegExp.prototype, "exec"], [RegExp.prototype, "test"], [RegExp.prototype, Symbol.replace],
  [TA, "subarray"], [TA, "length"], [TA, Symbol.iterator], [Reflect, "apply"], [Math, "min"],
  [Error, "captureStackTrace"], [Number.prototype, "toString"], [Object.prototype, "toString"],
  [Array.prototype, "0"], [Array.prototype, "1"], [Array.prototype, "2"], [Array.prototype, "3"],
  [Object.prototype, "get"], [Object.prototype, "set"], [Object.prototype, "value"],
  [Object.prototype, "writable"], [Object.prototype, "enumerable"], [Object.prototype, "configurable"],
  [Object.prototype, "error"], [Object.prototype, "missing"],
];
for (let i = 0; i < targets.length; i++) {
  define(targets[i][0], targets[i][1], { __proto__: null, get: hijack, set: hijack, configurable: true });
}
