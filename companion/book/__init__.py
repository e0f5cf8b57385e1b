"""The book's tooling, kept apart from the library: what the chapters need beyond the Transformer itself.

* :mod:`companion.book.experiments` -- one module per chapter experiment (small RNNs, language models, probes,
  the assembled model's measurements, the decoding study), built on the core library;
* :mod:`companion.book.interactive` -- ``interact()``, the widget that also stores every state's output so that
  the website's controls respond without a kernel.

Installed with the package (Colab chapters import it), never imported by the core library or the run layer:
``import companion`` does not load it.
"""
