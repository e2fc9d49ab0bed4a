// Calls each host function that talks to the host.
text("plain");
text(7);
image("data:image/png;base64,AAAA");
image({ image_url: "data:image/png;base64,BBBB", detail: "LOW" });
try { image("https://attacker.example/?leak=1"); } catch (e) { text(e); }
const echoed = await tools.echo({ value: 7 });
text(echoed.echo);
store("k", 5);
text(load("k"));
text(load("nothing") === undefined ? "missing" : "present");
notify("hi");
await new Promise((resolve) => setTimeout(resolve, 1));
const id = setTimeout(() => text("never"), 1);
clearTimeout(id);
text("end");
