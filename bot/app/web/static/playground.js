// The playground's message box: Enter sends the message, Shift+Enter starts a new line
// (docs/web.md#playground). The console's only script; the page works without it.
"use strict";
document.addEventListener("keydown", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLTextAreaElement) || !box.form || !box.form.classList.contains("say")) {
    return;
  }
  if (event.key !== "Enter" || event.shiftKey || event.isComposing) {
    return;
  }
  event.preventDefault();
  if (box.value.trim()) {
    box.form.requestSubmit();
  }
});
