; Inno Setup script: turns the PyInstaller folder dist\hookscope into one setup .exe.
; Build the folder first (packaging\build-windows.ps1), then: iscc packaging\hookscope.iss
#define AppVersion GetEnv("HOOKSCOPE_VERSION")
#if AppVersion == ""
  #define AppVersion "0.1.0"
#endif
#define Variant GetEnv("HOOKSCOPE_VARIANT")
#if Variant == ""
  #define Variant "cpu"
#endif

[Setup]
AppId={{6D3B2B7E-8F0C-4C55-9E0A-48B1A6C5F1E2}
AppName=Hookscope
AppVersion={#AppVersion}
AppPublisher=Hookscope
DefaultDirName={autopf}\Hookscope
DefaultGroupName=Hookscope
OutputDir=..\dist
OutputBaseFilename=Hookscope-{#AppVersion}-{#Variant}-setup
LicenseFile=..\LICENSE
ChangesAssociations=yes
SetupIconFile=..\resources\icons\hookscope.ico
Compression=lzma2/max
SolidCompression=yes
ArchitecturesInstallIn64BitMode=x64compatible
PrivilegesRequired=lowest
UninstallDisplayIcon={app}\hookscope.exe

[Files]
Source: "..\dist\hookscope\*"; DestDir: "{app}"; Flags: recursesubdirs ignoreversion

[Icons]
Name: "{group}\Hookscope"; Filename: "{app}\hookscope.exe"
Name: "{autodesktop}\Hookscope"; Filename: "{app}\hookscope.exe"; Tasks: desktopicon

[Tasks]
Name: desktopicon; Description: "Create a desktop shortcut"; Flags: unchecked

[Registry]
; "Open with > Hookscope" for images; several files chosen at once start one Hookscope each (%1).
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe"; ValueType: string; ValueName: "FriendlyAppName"; ValueData: "Hookscope"; Flags: uninsdeletekey
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\shell\open\command"; ValueType: string; ValueName: ""; ValueData: """{app}\hookscope.exe"" ""%1"""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".png"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".jpg"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".jpeg"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".bmp"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".tif"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".tiff"; ValueData: ""
Root: HKA; Subkey: "Software\Classes\Applications\hookscope.exe\SupportedTypes"; ValueType: string; ValueName: ".webp"; ValueData: ""

[Run]
Filename: "{app}\hookscope.exe"; Description: "Start Hookscope"; Flags: nowait postinstall skipifsilent
