// libqrencode (Debian: libqrencode-dev to build, libqrencode4 at run time).
#include <qrencode.h>
