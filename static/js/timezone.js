// Times are rendered in the browser's time zone: tell the server which one it is (portal/middleware.py).
// Loaded without defer in <head>, as the inline script it replaces was (the CSP allows no inline script).
(function () {
  try {
    var tz = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (tz) { document.cookie = "tz=" + encodeURIComponent(tz) + ";path=/;max-age=31536000;samesite=lax"; }
  } catch (e) { /* an old browser: times stay in UTC, and the footer says so */ }
})();
