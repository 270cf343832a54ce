"""servelab's face: the Textual dashboard and the ``servelab`` command, thin over ``engines``."""
