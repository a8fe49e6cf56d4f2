// The Bridle panel's only hand-written script, loaded from 'self' (no inline script under the
// panel's Content-Security-Policy). It opens and closes native <dialog> confirmations:
// a button with data-open-dialog="ID" opens dialog ID modally; data-close-dialog closes the
// dialog it is in. Everything else is plain forms and htmx attributes.
"use strict";
document.addEventListener("click", (event) => {
  const opener = event.target.closest("[data-open-dialog]");
  if (opener) {
    const dialog = document.getElementById(opener.dataset.openDialog);
    if (dialog && typeof dialog.showModal === "function") {
      event.preventDefault();
      dialog.showModal();
    }
    return;
  }
  const closer = event.target.closest("[data-close-dialog]");
  if (closer) {
    const dialog = closer.closest("dialog");
    if (dialog) {
      event.preventDefault();
      dialog.close();
    }
  }
});
