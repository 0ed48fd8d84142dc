/* The C implementation of detectors/blocktokens.py: the same `ascii_tokens`.
 *
 * Contract: see blocktokens.py. The text must be an ASCII str (a ValueError otherwise);
 * the result is the list the module's regex would find, token for token.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_INDENT 64

/* 1: [A-Za-z0-9_]; 2: whitespace as Python's str.isspace() has it in ASCII. */
static unsigned char kind[128];

static void kind_init(void) {
    for (int c = 0; c < 128; c++) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '_') {
            kind[c] = 1;
        } else if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) {
            kind[c] = 2;
        }
    }
}

static int push(PyObject *out, const Py_UCS1 *start, Py_ssize_t len) {
    PyObject *tok;
    if (len == 1) {
        tok = PyUnicode_FromOrdinal(*start); /* the interpreter's one-character string */
    } else {
        tok = PyUnicode_New(len, 127);
        if (tok != NULL) {
            memcpy(PyUnicode_1BYTE_DATA(tok), start, (size_t)len);
        }
    }
    if (tok == NULL) {
        return -1;
    }
    int failed = PyList_Append(out, tok);
    Py_DECREF(tok);
    return failed;
}

static PyObject *ascii_tokens(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "ascii_tokens() takes a str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "ascii_tokens() takes ASCII text only");
        return NULL;
    }
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < n) {
        Py_UCS1 c = s[i];
        Py_ssize_t j = i + 1;
        if (kind[c] == 1) {
            while (j < n && kind[s[j]] == 1) {
                j++;
            }
        } else if (c == '\n') {
            while (j < n && j - i <= MAX_INDENT && (s[j] == ' ' || s[j] == '\t')) {
                j++;
            }
        } else if (kind[c] == 2) {
            i = j;
            continue;
        }
        if (push(out, s + i, j - i) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        i = j;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"ascii_tokens", ascii_tokens, METH_O,
     "ascii_tokens(text) -> list[str]: see detectors/blocktokens.py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "detectors.blocktokens",
    "The C implementation of detectors/blocktokens.py's ascii_tokens (see that module).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_blocktokens(void) {
    kind_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_INDENT", MAX_INDENT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
