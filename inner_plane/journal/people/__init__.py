"""The people aggregate: the person each delegate serves (``people``), their bearer tokens
(``person_tokens``) and the questions put to them (``questions``)."""
